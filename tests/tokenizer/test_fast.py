"""The fast backend gives exactly the real tokenizer's ids: every shared book, a hostile text made
of every trap found so far, and random strings weighted towards them (hypothesis), for the real
bert-base-uncased and for cased and uncased WordPiece tokenizers trained by jobs.train_tokenizer."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.kernels.common.hash_table import ByteTable
from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.kernels.tokenizer.wordpiece.encode import ISOLATED, LETTER, OTHER
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend, fast_support
from pipeline.tokenizer.spec import build_tokenizer
from tests.conftest import BOOKS, HAVE_CORPUS, book_cases

HOSTILE = "".join([
    "plain words, punctuation!? (brackets) [SEP] [MASK] [CLS] and [PAD] as text; ",
    "nbsp\u00a0split ideographic\u3000space line\u2028separator para\u2029graph ",
    "control\x1cjoins\x1d\x1e\x1fwords the\x85the zero\u200bwidth bom\ufeffjoins soft\u00adhyphen ",
    "combining e\u0301 alone \u0301 after punctuation the,\u0301the after space the \u0301the ",
    "\u0303\u0303 double marks a\u0308\u0301 ",
    "greek \u03a3\u039f\u03a6\u039f\u03a3 final sigma \u03c3\u03bf\u03c6\u03bf\u03c2 turkish \u0130stanbul dotless \u0131 ",
    "cjk \u6f22\u5b57\u306e\u6587\u3002\uff0c\u3001 hangul \ud55c\uad6d\uc5b4 jamo \u1100\u1161 ",
    "emoji \U0001F600\U0001F680 family \U0001F468\u200d\U0001F469\u200d\U0001F467 flags \U0001F1EB\U0001F1F7 ",
    "rtl \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u202eoverride\u202c ",
    "ligature \ufb01ne \ufb03 fullwidth \uff21\uff22\uff23 roman \u2163 fraction \u00bd ellipsis\u2026 ",
    "quotes \u201cdouble\u201d \u2018single\u2019 dashes \u2014 \u2013 \u2010 ",
    "a" * 101 + " " + "b" * 100 + " ",
    "#### ## # ##x x## ",
    "\ufffd replacement \x00 nul \x7f del\t tab\r\n crlf \r cr ",
    "MiXeD CaSe WORDS Caf\u00e9 NA\u00cfVE \u00c5ngstr\u00f6m ",
    "x" * 25_000 + " ",  # a very long word in a very long line
    "numbers 3.14159 1,000,000 2nd 10th",
])


@pytest.fixture(scope="module")
def trained_tokenizers(tmp_path_factory, small_books):
    """Cased and uncased WordPiece tokenizers from jobs.train_tokenizer on the small books."""
    from jobs.train_tokenizer import run

    out = {}
    for name, extra in (("uncased", []), ("cased", ["--cased"])):
        folder = tmp_path_factory.mktemp(f"tok-{name}")
        run(["--input", str(small_books), "--vocab_size", "2000", "--output", str(folder), *extra])
        out[name] = (folder / "tokenizer.json").read_text()
    return out


@functools.lru_cache(maxsize=8)
def _pair(tokenizer_json: str) -> tuple[Tokenizer, FastTokenizer]:
    from pipeline.tokenizer.spec import TokenizerSpec

    real = build_tokenizer(TokenizerSpec.from_json(tokenizer_json))
    return real, FastTokenizer(real, tokenizer_json)


def _real_ids(real: Tokenizer, text: str) -> np.ndarray:
    return np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)


def _assert_same(real: Tokenizer, fast: FastTokenizer, text: str) -> None:
    expected, got = _real_ids(real, text), fast.encode(text)
    if not np.array_equal(expected, got):
        n = min(len(expected), len(got))
        first = int(np.flatnonzero(expected[:n] != got[:n])[0]) if (expected[:n] != got[:n]).any() else n
        raise AssertionError(f"first difference at token {first}: real {expected[first:first + 5]} "
                             f"fast {got[first:first + 5]} (lengths {len(expected)} / {len(got)}) in {text[:80]!r}")


def test_every_shared_book_gives_the_real_ids(spec):
    real, fast = _pair(spec.json)
    books = 0
    for path in sorted(BOOKS.glob("*.txt")):
        try:
            text = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
        expected = tokenize_text(real, text)  # the real tokenizer on paragraph pieces, in parallel batches
        np.testing.assert_array_equal(fast.encode(text), expected, err_msg=path.name)  # the whole book at once
        np.testing.assert_array_equal(tokenize_text(fast, text), expected, err_msg=path.name)
        books += 1
    assert books >= (40 if HAVE_CORPUS else 3)  # the shared corpus, or the embedded sample without it


def test_hostile_text_gives_the_real_ids(spec, trained_tokenizers):
    for tokenizer_json in (spec.json, *trained_tokenizers.values()):
        real, fast = _pair(tokenizer_json)
        _assert_same(real, fast, HOSTILE)
        for piece in HOSTILE.split(" "):
            _assert_same(real, fast, piece)


def test_the_fast_path_covers_real_text_not_only_ascii(spec):
    """The table built from the tokenizer vouches for accented letters, curly quotes, dashes and
    CJK (so books with them stay on the fast path), and not for marks or letters it cannot prove."""
    _, fast = _pair(spec.json)
    kinds = fast.tables.code_points.kinds
    assert kinds[ord("\u00e9")] == LETTER and kinds[ord("\u2019")] == ISOLATED and kinds[ord("\u6f22")] == ISOLATED
    assert kinds[ord("\u2014")] == ISOLATED and kinds[ord("\u0301")] == LETTER  # removed: joins words
    assert kinds[ord("\u1100")] == LETTER and kinds[ord("\u0915")] == LETTER  # kept as themselves (issue 33)
    assert kinds[ord("\u1b44")] == OTHER  # a spacing mark of class 9 that NFD may reorder and no strip removes


_TRAPS = st.sampled_from(list(" \t\r\n\u00a0\u3000\u2028\x1c\x1f\x85\u200b\ufeff\u0301\u0303\u0308.,!?'\"#[]"
                              "\u03a3\u03c2\u0130\u0131\u6f22\u3002\uff0c\u00e9\u00c9\u2019\u201c\u2014\ufb01\u00bd"
                              "\U0001F600\u05e9\u0645\u1100\u1161\ud55c\ufffd\x00\x7f"))
_TEXT = st.lists(st.one_of(_TRAPS, st.characters(blacklist_categories=("Cs",)),
                           st.sampled_from(["the", "The", "UNAFFABLE", "running", "##", "[SEP]", "x" * 101])),
                 max_size=60).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_random_unicode_gives_the_real_ids_uncased(spec, text):
    real, fast = _pair(spec.json)
    _assert_same(real, fast, text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_random_unicode_gives_the_real_ids_cased(trained_tokenizers, text):
    real, fast = _pair(trained_tokenizers["cased"])
    _assert_same(real, fast, text)


def test_unsupported_tokenizers_are_named(spec, trained_tokenizers):
    config = json.loads(spec.json)
    config["pre_tokenizer"] = {"type": "Whitespace"}
    problems = fast_support(config)
    assert problems == ["pre-tokenizer Whitespace (only BertPreTokenizer)"]
    with pytest.raises(UnsupportedTokenizer, match="pre-tokenizer Whitespace"):
        choose_backend("fast", json.dumps(config))
    assert choose_backend("auto", json.dumps(config)) == ("hf", [f"WordPiece family: {p}" for p in problems])
    assert choose_backend("auto", spec.json) == ("fast", [])
    assert choose_backend("hf", spec.json)[0] == "hf"
    config = json.loads(spec.json)
    config["added_tokens"].append({"id": 5, "content": "foo", "special": False, "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": True})
    assert fast_support(config) == []  # added tokens are split out before the family (test_added_tokens.py)


@pytest.mark.parametrize("lowercase, strip_accents, chinese, max_chars", [
    (True, None, True, 100), (True, False, True, 100), (True, True, False, 100),
    (False, None, True, 100), (False, True, True, 100), (False, False, False, 12),
])
@pytest.mark.parametrize("book", book_cases("classics__don_quixote.txt"))
def test_bert_normalizer_settings_give_the_real_ids(spec, lowercase, strip_accents, chinese, max_chars, book):
    """Every BertNormalizer setting (lowercase, strip_accents on/off/unset, handle_chinese_chars) and
    a small max_input_chars_per_word, on the bert-base vocabulary, over the traps and a book."""
    config = json.loads(spec.json)
    config["normalizer"].update(lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=chinese)
    config["model"]["max_input_chars_per_word"] = max_chars
    real, fast = _pair(json.dumps(config))
    _assert_same(real, fast, HOSTILE)
    book = clean_bytes(book.path.read_bytes()).text[:300_000]
    _assert_same(real, fast, book)
    _assert_same(real, fast, "Ca\u00f1\u00f3n \u00c9COLE na\u00efve \u6f22\u5b57 ".join(["x"] * 50))


@settings(max_examples=30, deadline=None)
@given(keys=st.dictionaries(st.binary(max_size=12), st.integers(0, 2**31 - 1), max_size=300),
       probes=st.lists(st.binary(max_size=12), max_size=50))
def test_the_shared_byte_table_finds_every_key_and_nothing_else(keys, probes):
    """`hash_table.ByteTable` (the WordPiece and byte-level vocabularies) against a dict: every key
    with its id (colliding prefixes, the empty key, NUL bytes), every other string -1."""
    table = ByteTable.build(keys)
    for key, value in keys.items():
        assert table.get(key) == value
    for probe in probes:
        assert table.get(probe) == keys.get(probe, -1)
