"""The SentencePiece model kernels called directly on tables of tiny vocabularies, against slow
plain-Python oracles: the Unigram Viterbi (`unigram.viterbi_ids`) against every segmentation of
the word, and byte-fallback BPE (`bpe.bpe_ids`, `bpe.merge_part`) against merging the whole word
pair by pair, lowest rank first, leftmost among equals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.tokenizer.sentencepiece.bpe import UNK_ID, BpeTables, bpe_ids, bpe_parts, merge_part
from pipeline.kernels.tokenizer.sentencepiece.unigram import UnigramTables, viterbi_ids

# ---- Unigram ----------------------------------------------------------------------------------

UNIGRAM_PIECES = ["<unk>", "a", "b", "c", "ab", "bc", "abc", "ca", "é", "aé", "zz", "zb", "😀", "a😀",
                  "<0x7A>", "<0xC3>"]
_scores = np.random.default_rng(35).uniform(-12.0, -1.0, len(UNIGRAM_PIECES))  # distinct: no ties to break
UNIGRAM_VOCAB = [(piece, float(score)) for piece, score in zip(UNIGRAM_PIECES, _scores)]
UNIGRAM_IDS = {piece: i for i, piece in enumerate(UNIGRAM_PIECES)}
UNIGRAM_ALPHABET = "abcéz😀ß"  # z and ß are no pieces: unknown nodes (z, and ß's first byte, have byte pieces)


def unigram_oracle(word: str, byte_fallback: bool, vocab: list[tuple[str, float]] = UNIGRAM_VOCAB) -> list[int]:
    """The best-scoring segmentation among all of them (a character with no one-character piece may
    be an unknown node, scored min - 10; among equal scores the one whose last node starts first,
    then the one before it, as `tokenizers`' forward pass keeps the first of equal candidates), runs
    of unknown nodes fused, then written as a piece, as byte pieces (when every byte has one) or as
    <unk>."""
    scores = dict(vocab)
    piece_ids = {piece: i for i, (piece, _) in enumerate(vocab)}
    unk_score = min(scores.values()) - 10.0
    n = len(word)
    if n == 0:
        return []
    paths = []
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [n]
        total, nodes = 0.0, []
        for a, b in zip(bounds, bounds[1:]):
            piece = word[a:b]
            if piece in scores:
                total += scores[piece]
                nodes.append((piece, False))
            elif b - a == 1:
                total += unk_score
                nodes.append((piece, True))
            else:
                break
        else:
            paths.append((total, bounds[-2::-1], nodes))  # starts of the nodes, last first
    top = max(total for total, _, _ in paths)
    best = min((path for path in paths if path[0] == top), key=lambda path: path[1])
    ids: list[int] = []
    for unknown, group in itertools.groupby(best[2], key=lambda node: node[1]):
        if not unknown:
            ids += [piece_ids[piece] for piece, _ in group]
            continue
        text = "".join(piece for piece, _ in group)
        pieces = [f"<0x{b:02X}>" for b in text.encode()]
        if text in piece_ids:
            ids.append(piece_ids[text])
        elif byte_fallback and all(p in piece_ids for p in pieces):
            ids += [piece_ids[p] for p in pieces]
        else:
            ids.append(piece_ids["<unk>"])
    return ids


def viterbi(word: str, tables: UnigramTables) -> list[int]:
    data = np.frombuffer(b"~~" + word.encode() + b"~", dtype=np.uint8)  # the word inside a longer buffer
    size = len(data)
    out = np.full(size + 4, -7, dtype=np.int32)
    out[0] = 99  # ids are appended from n_out = 1
    n_out = viterbi_ids(data, 2, size - 1, tables.pieces.cells, tables.scores, tables.byte_ids, tables.unk_id,
                        tables.unk_score, tables.byte_fallback, np.empty(size + 1), np.empty(size + 1, np.int64),
                        np.empty(size + 1, np.int32), out, 1)
    assert out[0] == 99
    return out[1:n_out].tolist()


@pytest.mark.parametrize("byte_fallback", [False, True])
def test_unigram_examples(byte_fallback):
    tables = UnigramTables.build(UNIGRAM_VOCAB, 0, byte_fallback)
    for word in ("abc", "a😀", "zb", "zzz", "ßa", "zß", ""):
        assert viterbi(word, tables) == unigram_oracle(word, byte_fallback), word
    z = [UNIGRAM_IDS["<0x7A>"]] if byte_fallback else [0]
    assert viterbi("z", tables) == z
    assert viterbi("ß", tables) == [0]  # its second byte has no byte piece: <unk>


def test_unigram_keeps_the_first_of_equal_candidates():
    """Equal scores (here "ab" and "ba"): the candidate met first at an end position is kept."""
    vocab = [("<unk>", -10.0), ("a", -1.0), ("b", -2.0), ("ab", -2.5), ("ba", -2.5)]
    tables = UnigramTables.build(vocab, 0, False)
    assert viterbi("aba", tables) == [1, 4]  # a + ba, not ab + a
    for word in ("abab", "baba", "ababa", "bab"):
        assert viterbi(word, tables) == unigram_oracle(word, False, vocab), word


def test_unigram_without_unk_fails_where_tokenizers_fails():
    tables = UnigramTables.build(UNIGRAM_VOCAB, None, False)
    assert viterbi("abc", tables) == unigram_oracle("abc", False)
    data = np.frombuffer(b"az", dtype=np.uint8)
    out = np.zeros(4, np.int32)
    assert viterbi_ids(data, 0, 2, tables.pieces.cells, tables.scores, tables.byte_ids, tables.unk_id,
                       tables.unk_score, tables.byte_fallback, np.empty(3), np.empty(3, np.int64),
                       np.empty(3, np.int32), out, 0) == -1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=UNIGRAM_ALPHABET, max_size=9), st.booleans())
def test_unigram_is_the_best_segmentation(word, byte_fallback):
    tables = UnigramTables.build(UNIGRAM_VOCAB, 0, byte_fallback)
    assert viterbi(word, tables) == unigram_oracle(word, byte_fallback)


# ---- BPE with byte fallback -------------------------------------------------------------------

BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]
MERGES = [("a", "b"), ("b", "c"), ("ab", "c"), ("c", "a"), ("a", "a"), ("aa", "b"), ("a", "é"), ("a", "😀"),
          ("b", "b"), ("bb", "bb"), ("ca", "ab")]
BPE_ALPHABET = "abcé😀zß"  # z, ß: no pieces (byte pieces when byte_fallback, else <unk>)


def bpe_vocab(with_bytes: bool) -> dict[str, int]:
    tokens = ["<unk>", "a", "b", "c", "é", "😀"] + [left + right for left, right in MERGES]
    tokens += BYTE_PIECES if with_bytes else []
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def bpe_oracle(word: str, vocab: dict[str, int], byte_fallback: bool, fuse_unk: bool, ignore_merges: bool) -> list[int]:
    """`BPE::merge_word` on the whole word: characters to pieces (byte pieces, or a pending <unk>
    written before the next known character), then the lowest-ranked pair merged, leftmost first."""
    if ignore_merges and word in vocab:
        return [vocab[word]]
    symbols: list[int] = []
    pending = False
    for char in word:
        if char in vocab:
            if pending:
                symbols.append(vocab["<unk>"])
                pending = False
            symbols.append(vocab[char])
        elif byte_fallback and all(f"<0x{b:02X}>" in vocab for b in char.encode()):
            symbols += [vocab[f"<0x{b:02X}>"] for b in char.encode()]
        elif pending and not fuse_unk:
            symbols.append(vocab["<unk>"])
        else:
            pending = True
    if pending:
        symbols.append(vocab["<unk>"])
    ranks = {(vocab[a], vocab[b]): (rank, vocab[a + b]) for rank, (a, b) in enumerate(MERGES)}
    while True:
        found = [(ranks[pair][0], q) for q, pair in enumerate(zip(symbols, symbols[1:])) if pair in ranks]
        if not found:
            return symbols
        _, q = min(found)
        symbols[q:q + 2] = [ranks[(symbols[q], symbols[q + 1])][1]]


def bpe_kernel(word: str, tables: BpeTables, whole: bool = False) -> list[int]:
    arrays = tables.arrays()
    data = np.frombuffer(b"##" + word.encode() + b"#", dtype=np.uint8)
    start, stop = 2, len(data) - 1
    size = stop - start
    out = np.full(4 * size + 4, -7, dtype=np.int32)
    symbols = np.empty(3 * size + 3, np.int32)
    mode, fuse, ignore, unk_mode, unk_id = arrays.flags.tolist()
    common = (arrays.blob, arrays.starts, arrays.lengths, arrays.ids, arrays.slots, arrays.char_ids)
    if whole:  # one part: merge_part on the whole word
        n_out = merge_part(data, start, stop, *common, arrays.merge_table, arrays.byte_ids, mode, fuse, unk_mode,
                           unk_id, symbols, out, 0)
    else:
        n_out = bpe_ids(data, start, stop, *common, arrays.merge_table, arrays.pair_table, arrays.byte_ids, mode, fuse,
                        ignore, unk_mode, unk_id, symbols, np.empty((size + 1, 2), np.int64), out, 0)
    return out[:n_out].tolist()


def test_bpe_examples():
    vocab = bpe_vocab(True)
    tables = BpeTables.build(vocab, MERGES, "<unk>", True, False, False)
    assert tables.bytes_isolated  # no merge takes a byte piece: the cuts around byte pieces are used
    assert bpe_kernel("abc", tables) == [vocab["abc"]]
    assert bpe_kernel("aab", tables) == [vocab["a"], vocab["ab"]]  # a+b ranks before a+a
    assert bpe_kernel("caab", tables) == [vocab["caab"]]  # a+b, then c+a, then ca+ab
    assert bpe_kernel("cabab", tables) == [vocab["c"], vocab["ab"], vocab["ab"]]
    assert bpe_kernel("azb", tables) == [vocab["a"], vocab["<0x7A>"], vocab["b"]]
    assert bpe_kernel("a😀", tables) == [vocab["a😀"]]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=BPE_ALPHABET, max_size=14), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_bpe_is_the_merges_of_the_whole_word(word, with_bytes, byte_fallback, fuse_unk, ignore_merges):
    vocab = bpe_vocab(with_bytes)
    tables = BpeTables.build(vocab, MERGES, "<unk>", byte_fallback, fuse_unk, ignore_merges)
    assert tables.unk_mode == UNK_ID
    expected = bpe_oracle(word, vocab, byte_fallback, fuse_unk, ignore_merges)
    assert bpe_kernel(word, tables) == expected  # cut into parts no merge crosses, each merged alone
    if not ignore_merges:
        assert bpe_kernel(word, tables, whole=True) == expected


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=BPE_ALPHABET, min_size=1, max_size=14))
def test_bpe_parts_cover_the_word_in_order(word):
    tables = BpeTables.build(bpe_vocab(True), MERGES, "<unk>", True, False, False)
    arrays = tables.arrays()
    data = np.frombuffer(word.encode(), dtype=np.uint8)
    parts = np.empty((len(data) + 1, 2), np.int64)
    count = bpe_parts(data, 0, len(data), arrays.blob, arrays.starts, arrays.lengths, arrays.ids, arrays.slots,
                      arrays.char_ids, arrays.pair_table, arrays.byte_ids, arrays.flags[0], parts)
    edges = parts[:count].ravel().tolist()
    assert edges[0] == 0 and edges[-1] == len(data)
    assert all(a < b for a, b in zip(edges[::2], edges[1::2]))
    assert edges[1:-1:2] == edges[2::2]  # each part starts where the one before it stops
    for cut in edges[1:-1:2]:  # at character boundaries
        assert data[cut] & 0xC0 != 0x80
