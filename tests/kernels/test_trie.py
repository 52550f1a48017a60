"""The double-array trie's builder (linear in the vocabulary: a free-cell list, and a cell that fails
as a first child MAX_TRIES times leaves it) gives exactly the lookups of a dict, on vocabularies large
and dense enough to grow the arrays and skip cells: every key, every prefix of a key, random probes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.tokenizer.sentencepiece.trie import MAX_TRIES, DoubleArray
from pipeline.kernels.tokenizer.sentencepiece.unigram import UnigramTables


def _vocabulary(seed: int, size: int) -> dict[bytes, int]:
    rng = random.Random(seed)
    alphabet = [bytes([b]) for b in b"abcdefghij"] + ["\u00e9\u00f1\u00df\u6f22\u2581".encode()[i: i + 1]
                                                       for i in range(11)]
    out: dict[bytes, int] = {bytes([b]): b for b in range(256)}  # a node with all 256 children
    out.update({b"x" + bytes([b]): 300 + b for b in range(0, 256, 3)})
    while len(out) < size:
        key = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        out.setdefault(key, rng.randrange(1 << 20))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lookups_are_a_dicts(seed):
    entries = _vocabulary(seed, 20_000)
    trie = DoubleArray.build(entries)
    for key, value in entries.items():
        assert trie.lookup(key) == value
        for k in range(1, len(key)):
            assert trie.lookup(key[:k]) == entries.get(key[:k], -1)
        assert trie.lookup(key + b"\xff") == entries.get(key + b"\xff", -1)
    rng = random.Random(seed)
    for _ in range(5000):
        probe = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        assert trie.lookup(probe) == entries.get(probe, -1)
    # compact as first-fit: the cells hold little more than the keys' bytes
    assert trie.cells.shape[0] <= sum(map(len, entries)) + 512 + MAX_TRIES * 256


def test_the_empty_vocabulary_and_one_key():
    assert DoubleArray.build({}).lookup(b"a") == -1
    trie = DoubleArray.build({b"\x00\xff": 7})
    assert trie.lookup(b"\x00\xff") == 7 and trie.lookup(b"\x00") == -1


# ---- hostile vocabularies, the way a Unigram model hands them to the trie --------------------------

_FRAGMENTS = [b"a", b"ab", b"\x00", b"\xff", b"\x80", "\u00e9".encode(), "\u2581".encode(), "\U0001f600".encode(),
              b"<0x41>", b"<0x", b">"]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.lists(st.sampled_from(_FRAGMENTS), min_size=0, max_size=6).map(b"".join),
                       st.integers(0, 2**31 - 1), max_size=60))
def test_any_byte_keys_give_a_dicts_lookups(entries):
    """Keys of any bytes (NUL, 0xFF, lone continuation bytes, the empty key, chains of keys that are
    prefixes of each other): every key, every prefix and every one-byte extension looks up as in the dict."""
    trie = DoubleArray.build(entries)
    for key in entries:
        for k in range(1, len(key) + 1):
            assert trie.lookup(key[:k]) == (entries.get(key[:k], -1) if key[:k] else -1)
        for byte in (0, 0x41, 0x80, 0xFF):
            assert trie.lookup(key + bytes([byte])) == entries.get(key + bytes([byte]), -1)


def _hostile_unigram_vocabulary(size: int) -> list[tuple[str, float]]:
    """A Unigram vocabulary in id order: specials, the 256 byte pieces, chains of pieces each a prefix
    of the next (`a` ... 40 `a`s, `▁` ... `▁▁▁…`), pieces sharing long prefixes, 1-4 byte UTF-8,
    repeated pieces (the last id wins) and an empty piece (never found), then random pieces."""
    rng = random.Random(33)
    pieces = ["<unk>", "<s>", "</s>", ""] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["a" * n for n in range(1, 41)] + ["\u2581" * n for n in range(1, 9)]
    pieces += ["\u2581the" + "x" * n for n in range(30)] + ["漢字" * n + "😀" for n in range(1, 6)]
    pieces += ["ab", "a", "\u2581", "<0x41>"]  # repeats: ids later than their first
    alphabet = "ab\u00e9\u00df\u6f22\u2581\U0001f600z"
    while len(pieces) < size:
        pieces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))))
    return [(piece, -rng.uniform(1.0, 20.0)) for piece in pieces]


def test_a_hostile_60k_unigram_vocabulary_looks_up_as_a_dict():
    vocab = _hostile_unigram_vocabulary(60_000)
    oracle: dict[bytes, int] = {}
    for token_id, (piece, _) in enumerate(vocab):
        oracle[piece.encode()] = token_id  # last id wins, as tokenizers' token_to_id
    tables = UnigramTables.build(vocab, 0, True)
    trie = tables.pieces
    assert trie.lookup(b"") == -1
    for key, value in oracle.items():
        if not key:
            continue
        assert trie.lookup(key) == value
        for k in range(1, len(key)):
            assert trie.lookup(key[:k]) == oracle.get(key[:k], -1)
    rng = random.Random(1)
    for _ in range(20_000):
        probe = bytes(rng.choice(b"ab<>0x\x00\xff\xe2\x96\x81") for _ in range(rng.randint(1, 8)))
        assert trie.lookup(probe) == oracle.get(probe, -1)
    assert tables.byte_ids.tolist() == [oracle[f"<0x{b:02X}>".encode()] for b in range(256)]
    assert tables.byte_ids[0x41] > 4 + 0x41 and trie.lookup(b"ab") > 300  # the repeats' later ids
    assert tables.max_piece == max(len(key) for key in oracle)
    assert tables.unk_score == min(score for _, score in vocab) - 10.0
    assert tables.scores.tolist() == [score for _, score in vocab]
