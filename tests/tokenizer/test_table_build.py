"""The byte-level and WordPiece tables built from arrays (issue 33: builds linear in the vocabulary)
hold exactly what the tokenizer file and the real model say: every merge, every vocabulary entry,
every one-token word, whatever the merges' format, the affixes or the characters of the tokens."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.kernels.common.hash_table import ByteTable
from pipeline.kernels.common.string_arrays import StringArrays
from pipeline.kernels.tokenizer.bytelevel.encode import merge_table, merge_table_of
from pipeline.kernels.tokenizer.bytelevel.word_table import seed_words
from pipeline.kernels.tokenizer.wordpiece.encode import WordPieceTables
from pipeline.tokenizer.bytelevel import fast as bytelevel
from pipeline.tokenizer.components import BYTE_CHARS, CHAR_BYTES
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.wordpiece import fast as wordpiece
from tests.conftest import TOKENIZER_DIR
from tests.tokenizer.test_bytelevel import tokenizer_json

_MIXED = ["", "a", "ab", "é", "漢字", "😀x", "\ud800", "##é", "x##", "Ġthe", "ĠĠ", "</w>", "a</w>", "\u0143"]


def test_string_arrays_hold_each_string_as_python_does():
    """Offsets in UTF-8 and in code points, prefixes, suffixes and per-string character checks equal
    Python's own answers on strings of 1- to 4-byte characters, a lone surrogate and the empty string."""
    strings = StringArrays.of(_MIXED)
    assert len(strings) == len(_MIXED)
    for i, text in enumerate(_MIXED):
        utf8 = text.encode("utf-8", "surrogatepass")
        assert strings.utf8[strings.utf8_starts[i]:strings.utf8_starts[i + 1]].tobytes() == utf8
        assert "".join(map(chr, strings.code_points[strings.char_starts[i]:strings.char_starts[i + 1]])) == text
    for affix in ("", "#", "##", "Ġ", "</w>", "é"):
        assert strings.starting_with(affix).tolist() == [t.startswith(affix) for t in _MIXED]
        assert strings.ending_with(affix).tolist() == [t.endswith(affix) for t in _MIXED]
    not_ascii = strings.code_points >= 0x80
    assert strings.none_in_range(not_ascii, strings.char_starts[:-1], strings.char_starts[1:]).tolist() == \
        [t.isascii() for t in _MIXED]


def test_a_byte_table_of_arrays_finds_every_key_and_nothing_else():
    keys = [t.encode("utf-8", "surrogatepass") for t in _MIXED if t]
    strings = StringArrays.of([t for t in _MIXED if t])
    table = ByteTable.of_arrays(strings.utf8, strings.utf8_starts[:-1], np.diff(strings.utf8_starts),
                                np.arange(len(keys)) + 7)
    assert [table.get(k) for k in keys] == [i + 7 for i in range(len(keys))]
    assert table.get(b"abc") == table.get(b"") == table.get(b"\xc3") == -1
    with pytest.raises(ValueError, match="one length"):
        ByteTable.of_arrays(strings.utf8, strings.utf8_starts[:-1], np.diff(strings.utf8_starts), np.arange(2))


def test_a_pair_merged_twice_keeps_its_last_rank_as_tokenizers_does():
    a, b = np.array([5, 6, 5], dtype=np.int64), np.array([7, 8, 7], dtype=np.int64)
    table = merge_table_of(a, b, np.arange(3, dtype=np.int64), np.array([100, 101, 102], dtype=np.int64))
    np.testing.assert_array_equal(table, merge_table({(5, 7): (2, 102), (6, 8): (1, 101)}))
    assert (table[:, 0] != 0).sum() == 2


def test_the_word_tables_seeds_are_in_id_order_whatever_order_the_words_come_in():
    """Seeds of words of 1 to 15 bytes (a key of zeros, one a prefix of another, equal ids) come out
    in id order, then key order: the same table from the same words in any order."""
    rng = random.Random(5)
    words = {bytes(rng.randrange(256) for _ in range(rng.randint(1, 15))): rng.randrange(1 << 10) for _ in range(3000)}
    words[b"a"], words[b"a\x00"], words[b"\x00"] = 1, 2, 3
    packed = [int.from_bytes(w, "little") for w in words]
    k0 = np.array([p & (2 ** 64 - 1) for p in packed], dtype=np.uint64)
    k1 = np.array([p >> 64 for p in packed], dtype=np.uint64)
    lengths = np.array([len(w) for w in words], dtype=np.int64)
    ids = np.array(list(words.values()), dtype=np.int64)
    seeds = seed_words(k0, k1, lengths, ids)
    assert (np.diff(seeds[:, 2].astype(np.int64)) >= 0).all()
    order = np.random.default_rng(0).permutation(len(words))
    np.testing.assert_array_equal(seed_words(k0[order], k1[order], lengths[order], ids[order]), seeds)
    with pytest.raises(ValueError, match="1 to 15 bytes"):
        seed_words(k0[:1], k1[:1], np.array([16]), ids[:1])


def _byte_table_entries(blob, starts, lengths, ids) -> dict[bytes, int]:
    return {bytes(blob[s:s + n]): int(i) for s, n, i in zip(starts, lengths, ids)}


@pytest.mark.parametrize("name", ["roberta", "llama3", "gpt2_affixes"])
@pytest.mark.parametrize("merge_format", ["pairs", "strings"])
def test_the_byte_level_tables_hold_the_files_merges_vocabulary_and_one_token_words(name, merge_format):
    """Every merge (a, b) -> (rank, id of a + b less the prefix), every token keyed by its bytes, and
    each one-token word is a word the real model makes that one token (the words the table leaves
    out are those whose bytes lack an initial id: the real model decides them)."""
    config = json.loads(tokenizer_json(name))
    model = config["model"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    model["merges"] = [" ".join(m) for m in merges] if merge_format == "strings" else merges
    tables = bytelevel._build_tables(config)
    vocab, prefix = model["vocab"], model.get("continuing_subword_prefix") or ""
    from pipeline.kernels.tokenizer.bytelevel.encode import _merge_lookup

    for rank, (a, b) in enumerate(merges):
        new = vocab[(a.encode() + b.encode()[len(prefix.encode()):]).decode()]
        assert tuple(_merge_lookup(vocab[a], vocab[b], tables.merges)) == (rank, new)
    assert (tables.merges[:, 0] != 0).sum() == len({(vocab[a], vocab[b]) for a, b in merges})
    expected = {bytes(CHAR_BYTES[c] for c in t): i for t, i in vocab.items() if t and all(c in CHAR_BYTES for c in t)}
    assert _byte_table_entries(tables.vocab_blob, tables.vocab_starts, tables.vocab_lengths,
                               tables.vocab_ids) == expected
    assert tables.max_key == max(map(len, expected))
    real = Tokenizer.from_str(json.dumps(config)).model
    seeds = [(int(k0), int(k1), int(token)) for k0, k1, token in tables.seeds]
    assert len(seeds) > 500 and any(k1 >> 56 > 8 for _, k1, _ in seeds)  # words of 9 to 15 bytes too
    for k0, k1, token in seeds:
        word = (k0 | (k1 & (2 ** 56 - 1)) << 64).to_bytes(16, "little")[:k1 >> 56]
        assert [t.id for t in real.tokenize("".join(BYTE_CHARS[b] for b in word))] == [token]


def test_a_merge_outside_the_vocabulary_is_refused_naming_it():
    config = json.loads(tokenizer_json("roberta"))
    config["model"]["merges"].append(["Ġthe", "zzzz"])
    with pytest.raises(UnsupportedTokenizer, match="zzzz"):
        bytelevel._build_tables(config)
    config["model"]["merges"] = ["a b c"]
    with pytest.raises(UnsupportedTokenizer, match="'a b c'"):
        bytelevel._build_tables(config)


def _wordpiece_reference(vocab: dict[str, int], prefix: str) -> tuple[dict[bytes, int], dict[bytes, int]]:
    """The word and continuation tables as a per-token loop builds them: every key by its UTF-8 (since
    issue 33 the kernel looks up non-ASCII words too)."""
    words, continuations = {}, {}
    for token, token_id in vocab.items():
        if token:
            words[token.encode()] = token_id
        if token.startswith(prefix) and len(token) > len(prefix):
            continuations[token[len(prefix):].encode()] = token_id
    return words, continuations


@pytest.mark.parametrize("prefix", ["##", "", "\u2581"])
def test_the_wordpiece_tables_hold_the_words_and_pieces_by_their_utf8(prefix):
    raw = (TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8")
    vocab = dict(json.loads(raw)["model"]["vocab"])
    for extra in ("é", "aé", "\u2581x", "\u2581", "\u2581é", "##", "###", "漢##", "x\u2581y"):
        vocab.setdefault(extra, len(vocab))
    tables = WordPieceTables.build(vocab, prefix, 100, 100, wordpiece._code_points(raw))
    words, continuations = _wordpiece_reference(vocab, prefix)
    assert _byte_table_entries(tables.words.blob, tables.words.starts, tables.words.lengths, tables.words.ids) \
        == words
    got = tables.continuations
    assert _byte_table_entries(got.blob, got.starts, got.lengths, got.ids) == continuations
    assert tables.max_key == max(map(len, (*words, *continuations)))


def test_the_wordpiece_unknown_id_is_the_one_token_to_id_gives():
    config = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    real = Tokenizer.from_str(json.dumps(config))
    assert wordpiece._unk_id(config) == real.token_to_id("[UNK]") == 100
    config["model"]["unk_token"] = "[NONE]"
    assert wordpiece._unk_id(config) == -1


@pytest.mark.parametrize("name", ["bert", "roberta", "llama3", "gpt2_affixes", "xlmr_unigram",
                                  "llama_bpe", "llama3 with added tokens"])
def test_a_process_parses_a_tokenizer_json_once_and_never_changes_the_parse(name):
    """What the launcher and a worker do with a tokenizer.json (spec, backend, cuts, fingerprint, the
    content tokenizer, the fast encoder and its tables) reads one shared parse (`parsed`): none of
    them may change it, or the next reader would see another tokenizer."""
    from pipeline.tokenizer import parsed as shared
    from pipeline.tokenizer.derived_cuts import no_cut_reason
    from pipeline.tokenizer.fast import FastTokenizer, choose_backend
    from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
    from tests.tokenizer.test_added_tokens import _with_added

    raw = ((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8") if name == "bert"
           else _with_added("llama3", None) if name.endswith("added tokens") else tokenizer_json(name))
    raw = json.dumps(json.loads(raw), ensure_ascii=False, indent=1)  # a text no earlier test parsed
    calls: list[int] = []
    loads = json.loads
    try:
        json.loads = lambda text, *a, **k: (calls.append(len(text)), loads(text, *a, **k))[1]
        spec = TokenizerSpec.from_json(raw)  # the launcher
        assert choose_backend("auto", spec.json)[0] == "fast"
        no_cut_reason(spec.json)
        assert len(spec.fingerprint) == 64
        launcher, kept = calls.count(len(raw)), dict(shared._PARSES)
        shared.release_parses()  # as the job's launcher does once its checks are done
        calls.clear()
        FastTokenizer(build_tokenizer(spec), spec.json).encode("Once upon a time, [MASK] <s> new york.")  # a worker
    finally:
        json.loads = loads
    unigram = name.endswith("unigram")  # its content JSON is a changed copy, checked in build_tokenizer
    assert launcher == 1 and calls.count(len(raw)) == (3 if unigram else 1)
    assert [loads(text) for text in kept] == list(kept.values())  # no reader changed the shared parse
    assert shared._PARSES == {}  # the encoder built, the parse (170 MB at 250k tokens) is let go
    assert shared.parsed(raw) == json.loads(raw)


def test_a_unigram_spelt_with_escapes_still_has_its_special_pieces_emptied():
    """The content check parses nothing where no model can be a Unigram, and a file that spells
    `Unigram` with JSON escapes is still one (tokenizers reads it so)."""
    from pipeline.tokenizer.content import content_tokenizer_json, may_be_unigram

    raw = tokenizer_json("xlmr_unigram")
    escaped = raw.replace('"type":"Unigram"', '"type":"\\u0055ni\\u0067ram"')
    assert escaped != raw and not may_be_unigram(escaped.replace("\\u0055", "U").replace("\\u0067", "x"))
    assert Tokenizer.from_str(escaped).to_str() == Tokenizer.from_str(raw).to_str()
    content = json.loads(content_tokenizer_json(escaped, {0, 1, 2, 3}))
    assert [piece for piece, _ in content["model"]["vocab"][:4]] == ["", "", "", ""]
    assert not may_be_unigram(tokenizer_json("roberta")) and may_be_unigram(raw)
