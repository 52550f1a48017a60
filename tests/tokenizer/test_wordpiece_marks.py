"""WordPiece on text heavy in combining marks and non-ASCII letters (issue 33): the kernel vouches for
a character whose normalised output the probe proves the same in every context (a cased or
accent-keeping BertNormalizer keeps `g̃`'s U+0303 inside the word, as BertPreTokenizer does), looks
the word up by its UTF-8 bytes, and gives every id the real tokenizer's `encode` of the whole text
gives; a normalizer that composes or reorders marks keeps them on the real tokenizer.

The tokenizers: one small WordPiece vocabulary of words full of marks, under each normalizer the family accepts: BertNormalizer cased and uncased with strip_accents
True, False and None, the NFD + StripAccents + Lowercase sequence, and NFD / NFC alone."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from pipeline.kernels.common.hash_table import ByteTable, hash_bytes
from pipeline.kernels.tokenizer.wordpiece.encode import (
    ISOLATED,
    LETTER,
    OTHER,
    CodePointTable,
    _find,
    _ids_per_byte,
    encode_bytes,
    packed_records,
)
from pipeline.tokenizer.wordpiece.fast import COMPOSING, PER_CHARACTER, STRIPPED, WordPieceFastTokenizer, normal_forms

# Latin with combining diacritics, precomposed accents, Devanagari, Thai, Arabic with harakat, Hebrew
# with points, and spacing marks of combining class > 0 that no strip removes (Balinese, Rejang)
_LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MARKS = "".join(map(chr, range(0x0300, 0x0370)))
_ACCENTED = "éÉñÑüÜçÇåÅøØœŒßİıΣσςЙйЁё"
_DEVANAGARI = "".join(map(chr, range(0x0900, 0x0980)))
_THAI = "".join(map(chr, range(0x0E01, 0x0E5C)))
_ARABIC = "".join(map(chr, range(0x0621, 0x064B))) + "".join(map(chr, range(0x064B, 0x0653)))
_HEBREW = "".join(map(chr, range(0x05D0, 0x05EB))) + "".join(map(chr, range(0x05B0, 0x05C8)))
_ODD = "\u1b44\ua953\u302e\u1100\u1161\u0334\u0345\u20dd\u0488\u093e\u0903\u00a0\u3000\u6f22\u200b\ufeff\x00\ufffd"
_PUNCT = ".,;:!?'\"()-#[]\u2019\u201c\u2014\u3002"
_DIGITS = "0123456789\u0966\u0967\u0e51"
_SCRIPTS = (_LATIN, _ACCENTED, _DEVANAGARI, _THAI, _ARABIC, _HEBREW)


def _words(seed: int, count: int) -> list[str]:
    """Words of one script each with marks after letters, at their starts and doubled."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        letters = rng.choice(_SCRIPTS)
        word = ""
        for _ in range(rng.randint(1, 7)):
            word += rng.choice(letters)
            if rng.random() < 0.4:
                word += rng.choice(_MARKS) * rng.choice((1, 1, 2))
        out.append(("\u0303" if rng.random() < 0.1 else "") + word)
    return out


@functools.lru_cache(maxsize=1)
def _trained() -> dict:
    """A cased WordPiece vocabulary that keeps marks, built deterministically (a trainer's ties make
    another JSON each run, and each JSON its own probe): every character alone and as a continuation,
    then marked words and their two-character tails, `g̃` and Tagalog words among them."""
    chars = sorted(set("".join(_SCRIPTS) + _MARKS + _ODD + _PUNCT + _DIGITS))
    words = [word for word in _words(1, 400) if len(word) > 1] + ["mg\u0303a", "ng\u0303", "g\u0303", "ang", "sa"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + char for char in chars),
              *words, *("##" + word[-2:] for word in words)]
    vocab = {token: index for index, token in enumerate(dict.fromkeys(tokens))}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=30))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return json.loads(tokenizer.to_str())


_NORMALIZERS = {
    "cased": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
              "lowercase": False},
    "cased_strip": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": True,
                    "lowercase": False},
    "uncased": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
                "lowercase": True},
    "uncased_keep": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                     "strip_accents": False, "lowercase": True},
    "sequence_strip": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"},
                                                           {"type": "StripAccents"}]},
    "nfd": {"type": "NFD"},
    "nfc": {"type": "NFC"},
}
_FORMS = {"cased": PER_CHARACTER, "cased_strip": STRIPPED, "uncased": STRIPPED, "uncased_keep": PER_CHARACTER,
          "sequence_strip": STRIPPED, "nfd": COMPOSING, "nfc": COMPOSING}


@functools.lru_cache(maxsize=len(_NORMALIZERS))
def _pair(name: str) -> tuple[Tokenizer, WordPieceFastTokenizer, str]:
    config = dict(_trained(), normalizer=_NORMALIZERS[name])
    raw = json.dumps(config)
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    return real, WordPieceFastTokenizer(real, raw), raw


def _assert_same(name: str, text: str) -> None:
    real, fast, _ = _pair(name)
    expected = real.encode(text, add_special_tokens=False).ids
    got = fast.encode(text).tolist()
    assert got == expected, (name, text, real.encode(text, add_special_tokens=False).tokens)


def _spans(name: str, text: str) -> int:
    _, fast, _ = _pair(name)
    return encode_bytes(np.frombuffer(text.encode(), dtype=np.uint8), fast.tables, fast.cache)[1].shape[0]


def test_each_normalizer_is_classified_by_what_it_does_to_marks():
    for name, normalizer in _NORMALIZERS.items():
        assert normal_forms(normalizer) == _FORMS[name], name
    assert normal_forms(None) == PER_CHARACTER
    assert normal_forms({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFC"}, {"type": "StripAccents"}]}) \
        == COMPOSING
    assert normal_forms({"type": "Sequence", "normalizers": [{"type": "StripAccents"}, {"type": "NFKD"}]}) == COMPOSING


_TAGALOG = "Ang mg\u0303a bata ay nag\u0303 laro sa Maynila, at ang g\u0303 ay g\u0303g\u0303; " \
           "Señor Ibarra, ¿qué? Ng\u0303uni't "


def test_a_cased_wordpiece_keeps_words_with_marks_on_the_kernel_with_the_real_ids():
    """The `ang_filibusterismo` case: g + U+0303 kept by a cased BertNormalizer, and letters that stay
    non-ASCII (Devanagari, Hebrew with points): no fallback span, every id the real one."""
    real, fast, _ = _pair("cased")
    kinds = fast.tables.code_points.kinds
    assert kinds[0x0303] == LETTER and kinds[ord("\u00f1")] == LETTER and kinds[0x0915] == LETTER
    text = _TAGALOG * 3 + " नमस्ते दुनिया שָׁלוֹם ĝ̃ ̃start (̃) 3̃ ̃̃"
    assert _spans("cased", text) == 0
    _assert_same("cased", text)
    assert "mg\u0303a" in real.encode(_TAGALOG, add_special_tokens=False).tokens  # the word is one vocabulary entry


def test_max_input_chars_per_word_counts_characters_not_bytes():
    """30 characters of Devanagari (90 bytes) are a word; 31 are [UNK] (max_input_chars_per_word 30)."""
    real, fast, _ = _pair("cased")
    for word in ("\u0915" * 30, "\u0915" * 31, "g\u0303" * 15, "g\u0303" * 15 + "a", "\u00e9" * 30 + "\u0301"):
        assert _spans("cased", word) == 0
        _assert_same("cased", word + " x " + word)
    assert real.encode("\u0915" * 31, add_special_tokens=False).tokens == ["[UNK]"]


def test_a_composing_or_reordering_normalizer_leaves_marks_to_the_real_tokenizer():
    """NFC composes e + U+0301, NFD alone reorders marks of different classes, BertNormalizer's strip
    keeps a class-9 spacing mark (U+1B44) that its NFD may reorder: none of these is vouched for, and
    the ids stay the real ones."""
    for name in ("nfd", "nfc"):
        _, fast, _ = _pair(name)
        assert fast.tables.code_points.kinds[0x0301] == OTHER, name
        assert fast.tables.code_points.kinds[0x0915] == OTHER, name
        assert _spans(name, "e\u0301") == 1
    for name in ("uncased", "cased_strip", "sequence_strip"):
        cps = _pair(name)[1].tables.code_points
        assert cps.kinds[0x0915] == LETTER, name
        if name == "sequence_strip":  # StripAccents deletes every mark, BertNormalizer's strip only Mn
            assert cps.kinds[0x1B44] == LETTER and cps.lengths[0x1B44] == 0
        else:
            assert cps.kinds[0x1B44] == OTHER, name
    for name in _NORMALIZERS:
        _assert_same(name, "a\u0301\u0323 a\u0323\u0301 \u1b44\u0301\u1b44 x\u302e\u1b44x e\u0301 \u00e9\u0323 " + _TAGALOG)


def _piece(draw_from: str):
    return st.text(st.sampled_from(draw_from), min_size=1, max_size=4)


_SEPARATORS = st.sampled_from([" ", "  ", "\n", "\t", "\r\n", "", "", ""])
_PIECES = st.one_of(*(_piece(letters) for letters in _SCRIPTS), _piece(_MARKS), _piece(_MARKS + _LATIN),
                    _piece(_ODD), _piece(_PUNCT), _piece(_DIGITS), st.sampled_from(_words(2, 200)),
                    st.sampled_from(["mg\u0303a", "g\u0303", "\u0303", "\u0303\u0303", "ng\u0303"]))
_TEXTS = st.lists(st.tuples(_PIECES, _SEPARATORS).map("".join), max_size=30).map("".join)


@pytest.mark.parametrize("name", list(_NORMALIZERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXTS)
def test_texts_heavy_in_marks_give_the_real_ids(name, text):
    _assert_same(name, text)


def _ids_per_byte_oracle(cps: CodePointTable) -> int:
    most = 1
    for cp in range(cps.kinds.shape[0]):
        if cps.kinds[cp] == LETTER:
            count = len(bytes(cps.letters[cps.starts[cp]:cps.starts[cp] + cps.lengths[cp]]).decode())
        else:
            count = int(cps.lengths[cp]) if cps.kinds[cp] == ISOLATED else 0
        most = max(most, -(-count // len(chr(cp).encode("utf-8", "surrogatepass"))))
    return most


def test_the_output_buffer_holds_the_most_ids_a_byte_can_give():
    """One id a character of a LETTER's output, an ISOLATED character's ids, for the bytes it takes."""
    for name in ("cased", "uncased"):
        cps = _pair(name)[1].tables.code_points
        assert _ids_per_byte(cps) == _ids_per_byte_oracle(cps), name
    kinds = np.full(0x800, OTHER, dtype=np.uint8)
    starts, lengths = np.zeros(0x800, dtype=np.int32), np.zeros(0x800, dtype=np.int32)
    letters = "xé" + "abc" * 2
    kinds[0x41], lengths[0x41] = LETTER, 3  # "xé": two characters from one byte
    kinds[0x42], starts[0x42], lengths[0x42] = ISOLATED, 0, 3  # three ids from one byte
    kinds[0x100], starts[0x100], lengths[0x100] = LETTER, 3, 6  # six characters from two bytes
    table = CodePointTable(kinds, starts, lengths, np.frombuffer(letters.encode(), dtype=np.uint8), np.zeros(3, np.int32))
    assert _ids_per_byte(table) == _ids_per_byte_oracle(table) == 3
    kinds[0x42] = OTHER
    assert _ids_per_byte(table) == _ids_per_byte_oracle(table) == 3  # 6 characters / 2 bytes
    kinds[0x100] = OTHER
    assert _ids_per_byte(table) == _ids_per_byte_oracle(table) == 2


def test_the_packed_records_find_every_key_and_nothing_else():
    """`_find` over `packed_records` against a dict: every key (short, exactly 8 bytes, longer keys
    sharing their first 8 bytes, non-ASCII) with its id, and near misses (a byte more or less, one byte
    changed past the first 8) not at all."""
    rng = random.Random(5)
    keys = {"abcdefgh", "abcdefghi", "abcdefghj", "abcdefghij", "abcdefgh\u0303", "g\u0303", "a", "ab"}
    keys |= {"".join(rng.choice("ab\u0303\u0915") for _ in range(rng.randint(1, 14))) for _ in range(300)}
    vocab = {key: 7 + 3 * index for index, key in enumerate(sorted(keys))}
    table = ByteTable.of_arrays(*_blob_of(list(vocab)), np.asarray(list(vocab.values()), dtype=np.int32))
    records = packed_records(table)
    probes = set(keys) | {key + "a" for key in keys} | {key[:-1] for key in keys} | {key[:9] + "z" + key[10:] for key in keys}
    for probe in probes:
        data = np.frombuffer(probe.encode(), dtype=np.uint8)
        assert _find(np.uint64(hash_bytes(data, 0, data.shape[0])), data, 0, data.shape[0], records, table.blob) \
            == vocab.get(probe, -1), probe


def _blob_of(keys: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    encoded = [key.encode() for key in keys]
    lengths = np.asarray([len(key) for key in encoded], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts, lengths


def test_keys_whose_hashes_collide_are_told_apart_by_their_bytes():
    """Records sharing one hash and length in consecutive slots (as a collision puts them): the first
    8 bytes, then the bytes past them, pick the key."""
    keys = ["abcdefghij", "abcdefghik", "abcdefgzij", "zbcdefghij"]
    blob, starts, lengths = _blob_of(keys)
    records = np.zeros((16, 4), dtype=np.uint64)
    fake = np.uint64(0x1234_5678_0000_0003)  # slot 3 of 16
    for k, key in enumerate(keys):
        records[3 + k] = (fake, np.uint64(10) | np.uint64(100 + k) << np.uint64(32),
                          np.frombuffer(key.encode()[:8], dtype="<u8")[0], starts[k])
    for k, key in enumerate(keys + ["abcdefghil", "abcdefgzik"]):
        data = np.frombuffer(key.encode(), dtype=np.uint8)
        assert _find(fake, data, 0, 10, records, blob) == (100 + k if k < len(keys) else -1), key
