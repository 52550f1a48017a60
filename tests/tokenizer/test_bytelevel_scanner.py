"""The 64-byte pre-tokenizer of GPT-2's pattern (`pretokenize.window`) cuts every word where the real
regex does: whole shared books and long random texts of the risky characters (the scanner takes
over only 67 bytes before a text's end, so short texts never reach it), word by word through a
tokenizer whose ids mark every word end, and id by id through the RoBERTa-style test tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.kernels.tokenizer.bytelevel.encode import GPT2_PATTERN, LLAMA3_PATTERN
from pipeline.kernels.tokenizer.bytelevel.pretokenize import WINDOW_REACH, later_start, window
from pipeline.tokenizer.bytelevel.fast import MASK_CLASSES, _cached_classes
from tests.conftest import BOOKS
from tests.tokenizer.test_bytelevel import _BOUNDARY_PARTS, _RISKY, _WORDS, _word_end_marking, assert_same, pair

BOOK_BYTES = 40_000  # from the middle of every shared book


def _regex_starts(text: str) -> np.ndarray:
    """Byte offsets of the real pre-tokenizer's word starts, and the text's end."""
    real, _ = _word_end_marking(GPT2_PATTERN)
    chars = [start for _, (start, _) in real.pre_tokenizer.pre_tokenize_str(text)] + [len(text)]
    return np.array([len(text[:c].encode()) for c in chars])


def _assert_words(text: str) -> None:
    real, fast = _word_end_marking(GPT2_PATTERN)
    expected = real.encode(text, add_special_tokens=False).ids
    got = fast.encode(text).tolist()
    if got != expected:
        k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        raise AssertionError(f"first wrong id {k} of {len(expected)} near {text[max(0, k - 40):k + 40]!r}")


def test_the_ascii_classes_are_those_the_masks_see():
    """The scanner runs only where the regex engine classes ASCII as `class_masks64` does: it does
    for the tokenizers' engine, so every GPT-2-pattern tokenizer takes the 64-byte path."""
    np.testing.assert_array_equal(_cached_classes()[:128], MASK_CLASSES)
    for name in ("roberta", "modernbert", "gpt2", "gpt2_affixes"):
        assert pair(name)[1]._impl.tables.ascii_masks


def test_a_window_finds_the_regex_word_starts():
    """The window's trusted starts are the regex's word starts (ASCII prose, apostrophes and
    whitespace beyond ASCII left out as untrusted), and each word's end is the next start."""
    tables = pair("roberta")[1]._impl.tables
    text = ("He said:  \"it's 12 o'clock\"\n\n  and\tthe 3rd\u00a0man's caf\u00e9 -- left!!  Then, " * 3).encode()
    data = np.frombuffer(text, dtype=np.uint8)
    starts_true = _regex_starts(text.decode())
    position, found = 0, []
    while position + WINDOW_REACH <= len(text):
        starts, untrusted = window(data, position, tables.classes)
        end = later_start(np.uint64(starts), np.uint64(untrusted), 0)
        if end < 0 or end == 64:  # untrusted between, or no start: the scalar scanner's word
            position = int(starts_true[np.searchsorted(starts_true, position, side="right")])
        else:
            position += int(end)
            found.append(position)
    assert set(found) <= set(starts_true.tolist())
    assert len(found) > 0.7 * np.searchsorted(starts_true, position)  # most words came from the window


@pytest.mark.slow
def test_every_shared_book_is_cut_as_the_regex_cuts():
    for path in sorted(BOOKS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        _assert_words(text[middle:middle + BOOK_BYTES])


def test_book_slices_are_cut_as_the_regex_cuts():
    """A few books (the slow test above reads every one), with a 64-byte window on every offset."""
    for path in sorted(BOOKS.glob("*.txt"))[:6]:
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        _assert_words(text[middle:middle + 6_000])


@st.composite
def long_text(draw) -> str:
    """Runs of the characters the rules tell apart, long enough for many windows."""
    parts = st.one_of(st.sampled_from(_BOUNDARY_PARTS), st.sampled_from(_RISKY), st.sampled_from(_WORDS[:10]),
                      st.text(max_size=4))
    return "".join(draw(st.lists(parts, min_size=40, max_size=160)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_long_random_texts_are_cut_as_the_regex_cuts(text):
    _assert_words(text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_long_random_texts_give_the_real_ids(text):
    assert_same("roberta", text)


def test_llama3_pattern_keeps_the_scalar_scanner():
    """The 64-byte rules are GPT-2's: the Llama-3 tokenizer's words still come from `word_end`."""
    real, fast = _word_end_marking(LLAMA3_PATTERN)
    text = "We'll see:\n\n  it's 1234567 o'clock, (fine)  \r\n\tdone " * 4
    assert fast.encode(text).tolist() == real.encode(text, add_special_tokens=False).ids
