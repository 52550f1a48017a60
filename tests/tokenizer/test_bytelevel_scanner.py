"""The 64-byte pre-tokenizers of GPT-2's and Llama-3's patterns (`pretokenize.window`,
`window_llama3`) cut every word where the real regex does: whole shared books and long random texts
of the risky characters (the scanner takes over only 67 bytes before a text's end, so short texts
never reach it), word by word through a tokenizer whose ids mark every word end, and id by id
through the RoBERTa-style and Llama-3-style test tokenizers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.kernels.tokenizer.bytelevel.encode import GPT2_PATTERN, LLAMA3_PATTERN
from pipeline.kernels.tokenizer.bytelevel.pretokenize import WINDOW_REACH, later_start, window, window_llama3
from pipeline.tokenizer.bytelevel.fast import MASK_CLASSES, _cached_classes
from tests.conftest import BOOKS
from tests.tokenizer.test_bytelevel import _BOUNDARY_PARTS, _RISKY, _WORDS, _word_end_marking, assert_same, pair

BOOK_BYTES = 40_000  # from the middle of every shared book
PATTERNS = pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN], ids=["gpt2", "llama3"])
WINDOWS = {GPT2_PATTERN: window, LLAMA3_PATTERN: window_llama3}


def _regex_starts(text: str, pattern: str = GPT2_PATTERN) -> np.ndarray:
    """Byte offsets of the real pre-tokenizer's word starts, and the text's end."""
    real, _ = _word_end_marking(pattern)
    chars = [start for _, (start, _) in real.pre_tokenizer.pre_tokenize_str(text)] + [len(text)]
    offsets = np.cumsum([0] + [len(c.encode()) for c in text])
    return offsets[chars]


def _window_words(text: str, pattern: str) -> tuple[int, int]:
    """(words the window cut, words): walks the text from word start to word start, each word's end
    from the window when it vouches for one (asserted to be the regex's), else the regex's."""
    classes = pair("roberta")[1]._impl.tables.classes
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


@PATTERNS
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


@PATTERNS
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
