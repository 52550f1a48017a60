"""The SentencePiece fast path gives exactly the real tokenizer's ids: XLM-R / DeBERTa-v3 / T5 style
Unigram (with a real Precompiled charsmap), a Unigram behind `Sequence[Nmt, NFKC, Replace]` with
byte fallback, and Llama-style byte-fallback BPE, in the layouts the public models and the
converters use; on every shared book (a bounded sample of each), a hostile text, random strings
weighted to the risky classes, and texts cut at the safe cuts."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.kernels.tokenizer.sentencepiece.bpe import BpeTables
from pipeline.kernels.tokenizer.sentencepiece.bpe_stream import CUT_AFTER, CUT_BEFORE, CUT_BEFORE_SPACE, DIRECT_BYTES
from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import chunk_cache
from pipeline.kernels.tokenizer.sentencepiece.encode import encode_kernel, work_buffers
from pipeline.kernels.tokenizer.sentencepiece.normalizer import (
    CUT_DROP,
    CUT_KEEP,
    CUT_NONE,
    OP_MAP,
    OP_PREPEND,
    OP_REPLACE,
    OP_STRIP,
)
from pipeline.kernels.tokenizer.sentencepiece.trie import DoubleArray
from pipeline.tokenizer.encode import last_cut
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.sentencepiece.family import SENTENCEPIECE
from pipeline.tokenizer.sentencepiece.fast import SentencePieceFastTokenizer, sentencepiece_support
from pipeline.tokenizer.sentencepiece.stream import stream_form
from tests.conftest import BOOKS, HAVE_CORPUS

DATA = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
SHIPPED = ("xlmr_unigram", "t5_unigram", "nmt_nfkc_unigram", "llama_bpe")
BOOK_SAMPLE = 3_000  # characters of each book (from its middle) per tokenizer: the time budget


def _config(name: str) -> dict:
    return json.loads((DATA / name / "tokenizer.json").read_text(encoding="utf-8"))


def _variant(name: str) -> dict:
    """The shipped tokenizers plus the other layouts of the same models that public tokenizers use."""
    base, _, layout = name.partition(":")
    config = copy.deepcopy(_config(base))
    normalizers = config["normalizer"]["normalizers"] if config.get("normalizer") else []
    if layout == "deberta":  # DeBERTa-v3: Strip, Precompiled, Replace
        config["normalizer"]["normalizers"] = [{"type": "Strip", "strip_left": True, "strip_right": True},
                                               *normalizers]
    elif layout == "never":  # no prefix: the space opens the right part of a cut
        config["pre_tokenizer"]["prepend_scheme"] = "never"
    elif layout == "converter":  # transformers' SpmConverter today: whole-text Metaspace, spaces in the normalizer
        config["normalizer"]["normalizers"] = [
            *normalizers[:1],
            {"type": "Replace", "pattern": {"Regex": r"\A +| +\z"}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            {"type": "Replace", "pattern": {"Regex": "\\A\u2581"}, "content": "\u2581\u2581"}]
        config["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                   "split": False}
    elif layout == "first":  # Llama / Gemma converted without legacy: Metaspace first, no split, no normalizer
        config["normalizer"] = None
        config["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                   "split": False}
    elif layout == "gemma":  # Gemma: spaces replaced, nothing prepended
        config["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    elif layout == "j2":  # AI21 J2 through transformers' converter: no dummy prefix, pieces across spaces,
        # its user-defined pieces isolated by a Split of literal characters
        config["normalizer"]["normalizers"] = [*normalizers[:2],
                                               {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
        config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [ISOLATED_SPLIT]}
    elif layout == "converter_split":  # the converter with a dummy prefix and user-defined pieces
        config = _variant("xlmr_unigram:converter")
        config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [config["pre_tokenizer"], ISOLATED_SPLIT]}
    elif layout == "split":  # a splitting Metaspace, then the isolated pieces: cuts at spaces stay
        config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [config["pre_tokenizer"], ISOLATED_SPLIT]}
    elif layout == "replaces":  # more one-character Replaces, one before the Prepend, one to two characters
        config["normalizer"]["normalizers"] = [
            {"type": "Replace", "pattern": {"String": "\t"}, "content": "\u2581\u2581"}, *normalizers,
            {"type": "Replace", "pattern": {"String": "x"}, "content": "ks"}]
    return config


ISOLATED_SPLIT = {"type": "Split", "pattern": {"Regex": ",|\\(|\\)"}, "behavior": "Isolated", "invert": False}
ISOLATED = ("nmt_nfkc_unigram:j2", "xlmr_unigram:converter_split", "xlmr_unigram:split")
VARIANTS = (*SHIPPED, "xlmr_unigram:deberta", "xlmr_unigram:never", "xlmr_unigram:converter", "llama_bpe:first",
            "llama_bpe:gemma", *ISOLATED)


@functools.lru_cache(maxsize=16)
def _pair(name: str) -> tuple[Tokenizer, SentencePieceFastTokenizer]:
    raw = json.dumps(_variant(name), ensure_ascii=False)
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    return real, SentencePieceFastTokenizer(Tokenizer.from_str(raw), raw)


def _family_cut(name: str, text: str, position: int) -> tuple[int, int] | None:
    """The last cut the family's rule (what the document encoder cuts by) allows whose left part ends
    at or before `position`, as (left end, right start), or None."""
    raw = json.dumps(_variant(name), ensure_ascii=False)
    rule = SENTENCEPIECE.cuts(json.loads(raw), raw)
    at = last_cut(text, rule, min(position, len(text) - 2) + 1)
    return None if at < 0 else (at, at + rule.skip)


def _assert_same(name: str, text: str) -> None:
    real, fast = _pair(name)
    expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)
    got = fast.encode(text)
    if not np.array_equal(expected, got):
        n = min(len(expected), len(got))
        first = int(np.flatnonzero(expected[:n] != got[:n])[0]) if (expected[:n] != got[:n]).any() else n
        raise AssertionError(f"{name}: first difference at token {first}: real "
                             f"{[real.id_to_token(int(i)) for i in expected[first:first + 4]]} fast "
                             f"{[real.id_to_token(int(i)) for i in got[first:first + 4]]} "
                             f"(lengths {len(expected)} / {len(got)}) in {text[:80]!r}")


HOSTILE = "".join([
    "plain words, punctuation!? (brackets) <s> </s> <pad> <unk> <mask> <extra_id_0> as text; ",
    "  two  spaces   three\tand\ttabs \n\n newlines \r\n crlf \r cr  ",
    "nbsp\u00a0split ideographic\u3000space line\u2028separator para\u2029graph thin\u2009space ",
    "control\x1cjoins\x1d\x1e\x1fwords the\x85the zero\u200bwidth bom\ufeffjoins soft\u00adhyphen zwj\u200dx ",
    "combining e\u0301 alone \u0301 after punctuation the,\u0301the after space the \u0301the ",
    "\u0303\u0303 double marks a\u0308\u0301 ",
    "greek \u03a3\u039f\u03a6\u039f\u03a3 \u1f7d \u0390 turkish \u0130stanbul dotless \u0131 ",
    "cjk \u6f22\u5b57\u306e\u6587\u3002\uff0c\u3001 hangul \ud55c\uad6d\uc5b4 jamo \u1100\u1161\u11a8 \u3131\u314f ",
    "emoji \U0001F600\U0001F680 family \U0001F468\u200d\U0001F469\u200d\U0001F467 flags \U0001F1EB\U0001F1F7 ",
    "rtl \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u202eoverride\u202c \u0600\u0661 ",
    "ligature \ufb01ne \ufb03 fullwidth \uff21\uff22\uff23\uff11 roman \u2163 fraction \u00bd \u2460 \u33a1 \ufdfa ",
    "halfwidth \uff76\uff9e\uff8a\uff9f thai \u0e01\u0e33 lao \u0e81\u0eb3 ",
    "quotes \u201cdouble\u201d \u2018single\u2019 dashes \u2014 \u2013 \u2010 ",
    "meta \u2581 \u2581\u2581x x\u2581 \u2581 \u2581",
    "a" * 300 + " " + "b" * 100 + " ",
    "\ufffd replacement \x00 nul \x7f del \x01\x02 ",
    "MiXeD CaSe WORDS Caf\u00e9 NA\u00cfVE \u00c5ngstr\u00f6m \u212b ",
    "numbers 3.14159 1,000,000 2nd 10th 0123456789 ",
    "\U00020000\U0002A6D6 \U0001D400\U0001D7CE  trailing   ",
])


def _book_samples() -> list[tuple[str, str]]:
    samples = []
    for path in sorted(BOOKS.glob("*.txt")):
        try:
            text = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
        middle = len(text) // 2
        samples.append((path.name, text[middle:middle + BOOK_SAMPLE]))
    return samples


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shared_book_gives_the_real_ids(name):
    samples = _book_samples()
    assert len(samples) >= (40 if HAVE_CORPUS else 3)  # the shared corpus, or the embedded sample without it
    for _, sample in samples:
        _assert_same(name, sample)
    whole = "\n\n".join(sample for _, sample in samples[:8])  # also one long text across books
    _assert_same(name, whole)


@pytest.mark.parametrize("name", VARIANTS)
def test_hostile_text_gives_the_real_ids(name):
    _assert_same(name, HOSTILE)
    for piece in HOSTILE.split(" "):
        _assert_same(name, piece)
        _assert_same(name, " " + piece + " ")
    for text in ("", " ", "  ", "\u2581", " \u2581", "\u2581 ", "\n", "a", " a", "a ", "\u0301", "\U0001F600"):
        _assert_same(name, text)


_RISKY = st.sampled_from(list(
    " \t\r\n\u00a0\u3000\u2009\u2028\x1c\x1f\x85\x00\x01\x7f\u200b\u200d\ufeff\u00ad\u0301\u0303\u0308\u0344"
    ".,!?'\"#-\u2581\u03a3\u03c2\u0130\u0131\u1f7d\u6f22\u3002\uff0c\u00e9\u00c9\u2019\u201c\u2014\ufb01\u00bd"
    "\u2163\u2460\u33a1\ufdfa\uff21\uff76\uff9e\u0e33\u0600\U0001F600\U00020000\u05e9\u0645\u1100\u1161\u11a8"
    "\u3131\ud55c\ufffd0123456789"))
_WORDS = st.sampled_from(["the", "The", "THE", "running", "<s>", "</s>", "<unk>", "<mask>", "<pad>", "<extra_id_3>",
                          "<0x41>", "\u2581the", "x" * 40, "e\u0301", "  ", "   ", " \u2581 ", "1,000", "...", "--"])
_TEXT = st.lists(st.one_of(_RISKY, _WORDS, st.characters(blacklist_categories=("Cs",))), max_size=40).map("".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(VARIANTS), text=_TEXT)
def test_random_unicode_gives_the_real_ids(name, text):
    _assert_same(name, text)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(VARIANTS), words=st.lists(st.one_of(_WORDS, _TEXT), min_size=2, max_size=12),
       data=st.data())
def test_texts_cut_at_safe_cuts_give_the_ids_of_the_whole(name, words, data):
    """Encoding the parts between randomly chosen safe cuts and concatenating gives the ids of the whole
    text; the family's cut rule allows exactly the cuts the kernel uses."""
    real, fast = _pair(name)
    text = " ".join(["word", *words, "end."])
    cuts = [int(c) for c in fast.safe_cuts(text.encode("utf-8", "surrogatepass"))]
    positions = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=6)))
    chosen = []
    for position in positions:
        found = _family_cut(name, text, position)
        if found is None:
            continue
        left_end, right_start = found
        assert left_end <= position and text[left_end] == " "
        assert right_start == left_end + (1 if fast.tables.cut_mode == CUT_DROP else 0)
        assert len(text[:left_end].encode("utf-8", "surrogatepass")) in cuts
        if not chosen or left_end > chosen[-1][1]:
            chosen.append((left_end, right_start))
    parts, start = [], 0
    for left_end, right_start in chosen:
        parts.append(text[start:left_end])
        start = right_start
    parts.append(text[start:])
    expected = real.encode(text, add_special_tokens=False).ids
    got = [i for part in parts for i in real.encode(part, add_special_tokens=False).ids]
    assert got == expected, (name, parts)
    assert np.array_equal(np.concatenate([fast.encode(part) for part in parts]), np.asarray(expected, np.int32))


def test_cut_modes_follow_the_layout():
    """Cuts drop the space where every text gets a prefix `▁`, keep it where none does, and a Unigram
    that sees the whole text as one piece allows none; a plain book has many cuts."""
    modes = {name: _pair(name)[1].tables.cut_mode for name in VARIANTS}
    assert modes == {"xlmr_unigram": CUT_DROP, "t5_unigram": CUT_DROP, "nmt_nfkc_unigram": CUT_DROP,
                     "llama_bpe": CUT_DROP, "xlmr_unigram:deberta": CUT_DROP, "xlmr_unigram:never": CUT_KEEP,
                     "xlmr_unigram:converter": CUT_NONE, "llama_bpe:first": CUT_DROP, "llama_bpe:gemma": CUT_KEEP,
                     "nmt_nfkc_unigram:j2": CUT_NONE, "xlmr_unigram:converter_split": CUT_NONE,
                     "xlmr_unigram:split": CUT_DROP}
    _, fast = _pair("xlmr_unigram")
    assert len(fast.safe_cuts(b"It was the best of times, it was the worst of times.")) == 11
    assert _family_cut("xlmr_unigram:converter", "a b c", 3) is None


def test_the_probe_vouches_for_letters_not_for_marks():
    """The per-code-point table takes accented letters, CJK, curly quotes and compatibility forms
    (with their NFKC output), and leaves combining marks, jamo and format characters to the real
    tokenizer."""
    _, fast = _pair("xlmr_unigram")
    t = fast.tables

    def out(char: str) -> str:
        cp = ord(char)
        return bytes(t.cp_blob[t.cp_start[cp]:t.cp_start[cp] + t.cp_len[cp]]).decode()

    for char in "a\u00e9\u6f22\u2019\u0416\ufb01\uff21":
        assert t.flags[ord(char)], char
    assert out("\ufb01") == "fi" and out("\uff21") == "A"
    for char in "\u0301\u1100\u1161\u200d\u00ad\u0e33\uff9e\u0600\r":
        assert not t.flags[ord(char)], hex(ord(char))


def test_unsupported_tokenizers_are_named():
    config = _config("xlmr_unigram")
    assert sentencepiece_support(config) == []
    bytelevel = dict(config, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                            "use_regex": True})
    assert sentencepiece_support(bytelevel) == [
        "pre-tokenizer ByteLevel (only Metaspace, WhitespaceSplit+Metaspace or none, each optionally followed by an "
        "isolated Split of literal characters)"]
    bert = dict(config, normalizer={"type": "BertNormalizer"}, model={"type": "WordPiece", "vocab": {}})
    assert sentencepiece_support(bert) == ["normalizer BertNormalizer", "model WordPiece (only Unigram or BPE)"]
    plain = dict(config, added_tokens=[*config["added_tokens"], {
        "id": 5, "content": "foo", "special": False, "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": True}])
    assert "1 non-special added tokens (e.g. 'foo')" in sentencepiece_support(plain)
    regex = dict(config, normalizer={"type": "Replace", "pattern": {"Regex": "[0-9]+"}, "content": "0"})
    assert sentencepiece_support(regex) == ["normalizer Replace with pattern {'Regex': '[0-9]+'}"]
    with pytest.raises(UnsupportedTokenizer, match="SentencePiece family: .*pre-tokenizer ByteLevel"):
        SentencePieceFastTokenizer(Tokenizer.from_str(json.dumps(bytelevel)), json.dumps(bytelevel))


# Words around whitespace runs: the kernel cuts inside a text at a run of whitespace the normalizer
# maps to spaces, between neighbours that keep it a word start (curly quotes, CJK, accented letters
# on either side; `▁`, NBSP, marks, zero-width and format characters where it must not).
_RUN_WORDS = st.sampled_from(["the", "The", "\u201cThat\u2019s", "\u2014", "end.\u201d", "\u2581x", "x\u2581", "\u2581",
                              "e\u0301", "\u0301", "\u6f22\u5b57", "\u3002", "\u00a0", "x\u00a0", "\u200bx", "x\u200b",
                              "\ufb01ne", "\uff21", "\u2163", "caf\u00e9", "<s>", "\U0001F600", "\r", "a\rb", "1,000"])
_RUNS = st.sampled_from([" ", "\n", "\n\n", "\t", " \n ", "\x0c", "\x0b", "\r\n", "  ", "\n \n", "\u3000", " \u00a0 "])


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(("xlmr_unigram", "t5_unigram", "nmt_nfkc_unigram", "xlmr_unigram:deberta")),
       parts=st.lists(st.tuples(_RUN_WORDS, _RUNS), min_size=1, max_size=14), twice=st.booleans())
def test_whitespace_run_cuts_give_the_real_ids(name, parts, twice):
    """Texts of words and whitespace runs give the real ids, also when encoded a second time (the
    chunks and words then come from the cache)."""
    text = "".join(word + run for word, run in parts)
    _assert_same(name, text)
    if twice:
        _assert_same(name, text.strip())


def test_whitespace_run_cuts_are_on_where_the_layout_allows_them():
    """The kernel cuts at whitespace runs for the splitting, prepending Metaspace layouts whose
    normalizer only maps characters and collapses spaces, and nowhere else."""
    runs = {name: int(_pair(name)[1].tables.cuts[0][1]) for name in VARIANTS}
    assert runs == {"xlmr_unigram": 1, "t5_unigram": 1, "nmt_nfkc_unigram": 1, "llama_bpe": 0,
                    "xlmr_unigram:deberta": 0, "xlmr_unigram:never": 0, "xlmr_unigram:converter": 0,
                    "llama_bpe:first": 0, "llama_bpe:gemma": 0, "nmt_nfkc_unigram:j2": 0,
                    "xlmr_unigram:converter_split": 0, "xlmr_unigram:split": 1}
    t = _pair("xlmr_unigram")[1].tables
    assert t.edges[ord("\u201c")] == 3 and t.edges[ord("a")] == 3
    assert t.edges[ord("\u0301")] == 0 and t.edges[ord("\u00a0")] == 0  # a mark; NBSP maps to a space


def test_plain_characters_skip_the_tail_operations_only_where_they_cannot_act():
    """Curly quotes and letters are plain (one word: prefix and table output); `▁`, spaces, marks
    behind a normalizer and characters the normalizer makes spaces are not; a newline is plain where nothing treats it as
    whitespace (Llama-style: no pre-tokenizer, Replace of " " only)."""
    xlmr, llama = _pair("xlmr_unigram")[1].tables, _pair("llama_bpe")[1].tables
    for t in (xlmr, llama):
        assert t.plain_prefix[0] == 3 and t.plain_cp[ord("\u201c")] and t.plain_cp[ord("\u00e9")]
        assert not t.plain_cp[0x2581] and not t.plain_cp[0x20]
    assert not xlmr.plain_cp[0x0301]  # a mark: not vouched for behind a normalizer (Llama has none)
    assert not xlmr.plain_cp[0x0A] and not xlmr.plain_cp[0x3000]  # both normalise to a space
    assert llama.plain_map[0x0A] == 0x0A and llama.plain_cp[0x3000]
    assert not _pair("xlmr_unigram:deberta")[1].tables.plain_cp[0x3000]


def test_long_texts_without_cuts_give_the_real_ids():
    """A long text the kernel cannot cut (CJK without spaces, one long word) is one chunk, sized
    from its own bytes (a worst-case bound of the 66-fold growth some characters allow asked for
    hundreds of megabytes here)."""
    cjk = "\u53e4\u8005\u9109\u6709\u7e09\u7d33\uff0c\u5bb6\u90a6\u53d7\u5176\u5e87\u852d\u3002" * 700
    for name in ("xlmr_unigram", "nmt_nfkc_unigram", "llama_bpe"):
        _assert_same(name, cjk)
        _assert_same(name, "x" * 5000 + " " + cjk[:50])


@settings(max_examples=40, deadline=None)
@given(entries=st.dictionaries(st.binary(min_size=1, max_size=6), st.integers(0, 1 << 20), max_size=60),
       probes=st.lists(st.binary(min_size=1, max_size=7), max_size=30))
def test_double_array_trie_finds_exactly_its_keys(entries, probes):
    """The Unigram model's trie returns each key's id, and -1 for prefixes and other strings."""
    trie = DoubleArray.build(entries)
    for key, value in entries.items():
        assert trie.lookup(key) == value
    for probe in probes:
        assert trie.lookup(probe) == entries.get(probe, -1)
        for k in range(1, len(probe)):
            assert trie.lookup(probe[:k]) == entries.get(probe[:k], -1)


def test_chunks_the_real_tokenizer_encoded_are_remembered():
    """A chunk the kernel hands to the real tokenizer (doubled combining marks, a mark after a digit)
    gets the real ids, and the next time it comes it is a cache hit with the same ids (no fallback span)."""
    real, fast = _pair("xlmr_unigram")
    fast.cache = chunk_cache(1 << 10)  # empty (the cache only changes the speed)
    text = "ang ng\u0303\u0303 loob, at 1\u0301y"
    expected = real.encode(text, add_special_tokens=False).ids
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    for round_ in range(2):
        out, spans = np.empty(256, np.int32), np.empty((64, 3), np.int64)
        _, n_spans, _, _ = encode_kernel(data, 0, *fast._tables_args, fast.cache, out, 0, spans, 0, work_buffers())
        assert (n_spans == 0) == (round_ == 1)
        assert list(fast.encode(text)) == expected


# Llama-style BPE as one word cut into segments (pipeline.kernels.tokenizer.sentencepiece.bpe_stream)
STREAM = ("llama_bpe", "llama_bpe:gemma", "llama_bpe:replaces")


def test_llama_style_bpe_is_one_word_cut_where_no_merge_crosses():
    """Byte-fallback BPE without a pre-tokenizer behind Prepend and one-character Replaces is encoded
    as segments of one word: a newline (byte pieces) and a CJK character no piece pairs with are cut
    on both sides and written directly, a letter only before a space; layouts where a merge could
    cross a cut (Metaspace, a merge taking a byte piece, a missing byte piece) or the table is
    not the identity (see the next test), and Unigram, keep the chunk path."""
    for name in STREAM:
        assert _pair(name)[1].tables.stream is not None, name
    classes, direct, _, _, _, prefix, growth = _pair("llama_bpe")[1].tables.stream
    assert classes[0x0A] & (CUT_BEFORE | CUT_AFTER) == CUT_BEFORE | CUT_AFTER and direct[0x0A] == DIRECT_BYTES
    assert classes[ord("e")] & (CUT_BEFORE | CUT_AFTER) == 0 and classes[ord("e")] & CUT_BEFORE_SPACE
    assert direct[ord("e")] >= 0 and bytes(prefix).decode() == "\u2581" and growth[0] == 3
    lonely = [cp for cp in range(0x4E00, 0x9FFF) if classes[cp] & CUT_BEFORE and classes[cp] & CUT_AFTER]
    assert lonely and direct[lonely[0]] != -1
    assert _pair("llama_bpe:gemma")[1].tables.stream.prefix.size == 0
    replaced = _pair("llama_bpe:replaces")[1].tables.stream
    for char, out in (("x", "ks"), ("\t", "\u2581\u2581")):
        start, length = replaced.f_start[ord(char)], replaced.f_len[ord(char)]
        assert bytes(replaced.f_blob[start:start + length]).decode() == out
    for name in ("llama_bpe:first", "xlmr_unigram"):
        assert _pair(name)[1].tables.stream is None, name


def test_the_stream_form_needs_every_byte_piece_isolated_and_per_character_outputs():
    """Off where a cut could change the ids: a merge taking a byte piece, a missing byte piece (an
    unknown piece waits for the next character), ignore_merges (the whole text first), a
    per-character normalizer or a pre-tokenizer, a Replace of more than one character, a Strip."""
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}, "\u2581": 257, "a": 258, "b": 259, "ab": 260}
    ops = [(OP_MAP, "", ""), (OP_PREPEND, "", "\u2581"), (OP_REPLACE, " ", "\u2581")]
    model = {"type": "BPE"}

    def form(vocab=vocab, merges=(("a", "b"),), ops=ops, model=model, per_character=False, pre_tokenizer=False):
        tables = BpeTables.build(vocab, list(merges), "<unk>", True, True, bool(model.get("ignore_merges")))
        return stream_form(ops, per_character, pre_tokenizer, model, vocab, tables)

    assert form() is not None
    assert form(vocab={**vocab, "<0x0A><0x0A>": 261}, merges=(("a", "b"), ("<0x0A>", "<0x0A>"))) is None
    assert form(vocab={k: v for k, v in vocab.items() if k != "<0xFF>"}) is None
    assert form(model={"type": "BPE", "ignore_merges": True}) is None
    assert form(per_character=True) is None and form(pre_tokenizer=True) is None
    assert form(ops=[*ops, (OP_REPLACE, "ab", "c")]) is None and form(ops=[*ops, (OP_STRIP, " ", " ")]) is None
    assert form(ops=[*ops, (OP_REPLACE, "a", "")]) is None  # an empty output would leave a text without its prefix


_SEGMENT_WORDS = st.sampled_from(["\u6f22" * 30, "\u6f22\u5b57\u306e", "\n" * 5, "x" * 300, " " * 17, "\u2581" * 9,
                                  "\t\t", "ks", "\U0001F600" * 3, "e\u0301\u0301", "\u0e01\u0e33", "\x1c\x1f",
                                  "\u201cThat\u2019s", "end.\u201d\n\n", "\uff21\ufb01"])
_SEGMENT_TEXT = st.lists(st.one_of(_RISKY, _WORDS, _SEGMENT_WORDS, st.characters(blacklist_categories=("Cs",))),
                         max_size=50).map("".join)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(STREAM), text=_SEGMENT_TEXT, slots=st.sampled_from([2, 16, 1 << 12]))
def test_llama_style_segments_give_the_real_ids(name, text, slots):
    """Random texts weighted to byte-fallback characters, non-BMP, marks, space and newline runs and
    very long words give the real ids, the first time and again from the cache, also with a cache so
    small that segments keep evicting each other."""
    _, fast = _pair(name)
    kept, fast.cache = fast.cache, chunk_cache(slots)
    try:
        _assert_same(name, text)
        _assert_same(name, text)
        _assert_same(name, text[1:] + text[:1])
    finally:
        fast.cache = kept


def test_invalid_utf8_leaves_the_stream_path():
    """A lone surrogate (surrogatepass UTF-8) is no text the stream path encodes: it hands the text back."""
    _, fast = _pair("llama_bpe")
    assert fast._encode_stream("a\ud800b".encode("utf-8", "surrogatepass")) is None
    assert list(fast._encode_stream("a\n\u6f22".encode())) == list(fast.encode("a\n\u6f22"))


_ISOLATION_TRAPS = st.sampled_from([",", "(", ")", ",,", "(x)", " , ", "\uff0c", "\uff08", "\uff09", "\u2581,", ",\u2581",
                                    ", ", " (", ") ", "\u0301,", ",\u0301", "1,000", "a,b", "\u3001", "\ufe50"])
_ISOLATION_TEXT = st.lists(st.one_of(_ISOLATION_TRAPS, _RISKY, _WORDS), max_size=30).map("".join)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(ISOLATED), text=_ISOLATION_TEXT)
def test_an_isolated_split_of_literal_characters_gives_the_real_ids(name, text):
    """Commas and brackets (and what the normalizer turns into them: fullwidth forms) are words of their
    own, before, after or without Metaspace; next to marks the chunk goes to the real tokenizer."""
    _assert_same(name, text)


def test_an_isolated_split_is_taken_by_the_kernel_not_handed_on():
    """The isolated characters are not plain (a chunk holding one is several words) and the kernel
    encodes such chunks itself: no fallback span on plain text with commas and brackets."""
    for name in ISOLATED:
        _, fast = _pair(name)
        assert fast.tables.pretok[5:].tolist() == [3, ord(","), ord("("), ord(")")]
        assert not any(fast.tables.plain_map[ord(c)] for c in ",()")
    _, fast = _pair("nmt_nfkc_unigram:j2")
    text = "It was (he said) the best of times, it was the worst of times, (and so on)."
    data = text.encode()
    cuts, normalizer, uni, bpe = fast._tables_args
    out = np.empty(4 * len(data) + 64, dtype=np.int32)
    spans = np.empty((len(data), 3), dtype=np.int64)
    _, n_spans, _, _ = encode_kernel(np.frombuffer(data, np.uint8), 0, cuts, normalizer, uni, bpe, chunk_cache(64),
                                     out, 0, spans, 0, work_buffers())
    assert n_spans == 0
    _assert_same("nmt_nfkc_unigram:j2", text)
    # without a Metaspace each isolated character between ASCII neighbours is a chunk of its own: a
    # character handed to the real tokenizer takes its clause there, not the whole text
    assert [chr(b) for b in np.flatnonzero(fast.tables.isolate)] == ["(", ")", ","]
    assert not _pair("xlmr_unigram:converter_split")[1].tables.isolate.any()  # each chunk would get a `▁`
    marked = text.replace("best", "b\u0303\u0303est")
    data = marked.encode()
    _, n_spans, _, _ = encode_kernel(np.frombuffer(data, np.uint8), 0, cuts, normalizer, uni, bpe, chunk_cache(64),
                                     out, 0, spans, 0, work_buffers())
    assert n_spans == 1 and data[spans[0, 0]:spans[0, 1]].decode() == " the b\u0303\u0303est of times"
    _assert_same("nmt_nfkc_unigram:j2", marked)


@pytest.mark.parametrize("split, reason", [
    ({"Regex": "[,()]"}, "Split pattern"),
    ({"Regex": "\\d"}, "Split pattern"),
    ({"Regex": "ab|c"}, "Split pattern"),
    ({"String": "ab"}, "Split pattern"),
    ({"Regex": " |,"}, "Split isolating a space"),
])
def test_other_splits_are_refused_with_the_reason(split, reason):
    config = _variant("nmt_nfkc_unigram:j2")
    config["pre_tokenizer"]["pretokenizers"][0] = dict(ISOLATED_SPLIT, pattern=split)
    problems = sentencepiece_support(config)
    assert len(problems) == 1 and problems[0].startswith(reason), problems
    removed = _variant("nmt_nfkc_unigram:j2")
    removed["pre_tokenizer"]["pretokenizers"][0] = dict(ISOLATED_SPLIT, behavior="Removed")
    assert sentencepiece_support(removed) == ["Split behavior Removed (only Isolated, not inverted)"]
    before = _variant("xlmr_unigram")
    before["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [ISOLATED_SPLIT, before["pre_tokenizer"]]}
    assert sentencepiece_support(before)[0].startswith("pre-tokenizer Split+Metaspace")


def test_the_tables_are_built_once_for_the_cuts_and_the_encoder(monkeypatch):
    """The job asks for the cuts of the tokenizer.json and encodes with its content form (special
    pieces emptied: another JSON text); the Unigram tables are built once, for the encoder."""
    import pipeline.tokenizer.sentencepiece.fast as sp
    from pipeline.kernels.tokenizer.sentencepiece import unigram
    from pipeline.tokenizer.content import content_tokenizer_json
    from pipeline.tokenizer.fast import FastTokenizer
    from pipeline.tokenizer.spec import TokenizerSpec

    raw = (DATA / "xlmr_unigram" / "tokenizer.json").read_text(encoding="utf-8")
    spec = TokenizerSpec.from_json(raw)
    assert content_tokenizer_json(raw, set(spec.special_ids)) != raw  # <s>, </s>, ... are vocabulary pieces
    builds = []
    build = unigram.UnigramTables.build.__func__
    monkeypatch.setattr(unigram.UnigramTables, "build",
                        classmethod(lambda cls, *args: builds.append(len(args[0])) or build(cls, *args)))
    sp._TABLES.clear()
    fast = FastTokenizer(Tokenizer.from_str(raw), raw)
    assert builds == [4001]
    assert fast.cuts.before == " " and len(sp._TABLES) == 1
    sp._TABLES.clear()


_MARK_TEXT = st.lists(st.one_of(
    st.sampled_from(["g", "n", "e", "a", "G", "\u00f1", "\u0131", "\u00df", "\u0250", "1", ",", " ", "\u3042", "\u0301",
                     "\u0303", "\u0308", "\u0327", "\u0345", "\u036f", "\u0370", "\u0483", "\u200d", "\u1100"]),
    _WORDS), max_size=30).map("".join)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(("xlmr_unigram", "nmt_nfkc_unigram", "t5_unigram", "xlmr_unigram:deberta",
                             "nmt_nfkc_unigram:j2")), text=_MARK_TEXT)
def test_marks_after_letters_give_the_real_ids(name, text):
    """Combining marks after letters, alone, doubled, after marks, spaces, digits and kana."""
    _assert_same(name, text)


def test_a_mark_after_a_letter_is_taken_only_where_the_pair_stays_as_it_is():
    """Tagalog's `g̃` (a tilde no precomposed letter carries) is encoded by the kernel; `ñ` decomposed
    (which composes), a doubled mark and a mark after a space are handed on."""
    _, fast = _pair("xlmr_unigram")
    marks = fast.tables.marks.reshape(-1, 0x250)
    assert marks[0x303 - 0x300, ord("g")] and marks[0x303 - 0x300, ord("G")]
    assert not marks[0x303 - 0x300, ord("n")] and not marks[0x301 - 0x300, ord("e")]  # NFC: ñ, é
    assert not marks[0x303 - 0x300, ord(" ")] and not marks[0x303 - 0x300, ord("1")]  # bases are letters
    cuts, normalizer, uni, bpe = fast._tables_args

    def spans(text: str) -> int:
        data = text.encode()
        out = np.empty(4 * len(data) + 64, dtype=np.int32)
        found = np.empty((len(data) + 2, 3), dtype=np.int64)
        return encode_kernel(np.frombuffer(data, np.uint8), 0, cuts, normalizer, uni, bpe, chunk_cache(64), out, 0,
                             found, 0, work_buffers())[1]

    assert spans("ang mg\u0303a salita ng\u0303 bayan") == 0
    assert spans("man\u0303ana") == 1 and spans("g\u0303\u0303") == 1 and spans("a \u0303b") == 1
    for text in ("ang mg\u0303a salita ng\u0303 bayan", "man\u0303ana", "g\u0303\u0303", "a \u0303b"):
        _assert_same("xlmr_unigram", text)
    assert _pair("llama_bpe")[1].tables.marks.shape == (0,)  # no per-character normalizer: every character is itself
