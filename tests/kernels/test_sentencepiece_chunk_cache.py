"""The SentencePiece encoder's chunk cache keyed by packed words, its scratch buffers and its
eight-bytes-at-a-time scan (`pipeline.kernels.tokenizer.sentencepiece.chunk_cache`, `encode`)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import (
    CHUNK_BYTES,
    NO_FLAGS,
    chunk_cache,
    copy_ids,
    packed,
    packed_hash,
    probe_packed,
    remember_chunk,
    row_key,
    set_of,
)
from pipeline.kernels.tokenizer.sentencepiece.encode import encode_kernel, work_buffers
from pipeline.tokenizer.sentencepiece.fast import SentencePieceFastTokenizer

XLMR = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "xlmr_unigram" / "tokenizer.json"


def _words(data: bytes) -> tuple[int, int, int]:
    """The oracle of `packed`: three little-endian words, zero beyond the string."""
    padded = data.ljust(CHUNK_BYTES, b"\0")
    return tuple(int.from_bytes(padded[8 * k:8 * k + 8], "little") for k in range(3))


def _lookup(cache: np.ndarray, data: bytes) -> list[int] | None:
    """The ids the cache holds for the chunk `data` (as the encoder looks it up), or None."""
    array = np.frombuffer(data, np.uint8)
    k0, k1, k2 = (np.uint64(k) for k in packed(array, 0, len(data)))  # Python ints back: uint64 again
    h = np.uint64(packed_hash(k0, k1, k2))
    row = probe_packed(cache, set_of(h, cache), np.uint64(row_key(h, len(data), NO_FLAGS)), k0, k1, k2)
    if row < 0:
        return None
    out = np.empty(8, np.int32)
    return out[:copy_ids(cache.view(np.int32), row, out, 0)].tolist()


def _ids_of(data: bytes) -> np.ndarray:
    """Ids that tell strings apart (what the cache remembers is arbitrary to it)."""
    return np.array([len(data), *data[:3]], np.int32)


@settings(max_examples=40, deadline=None)
@given(strings=st.lists(st.binary(min_size=1, max_size=CHUNK_BYTES), min_size=1, max_size=40),
       slots=st.sampled_from([2, 4, 1 << 10]))
def test_a_packed_row_is_found_only_for_its_own_string(strings, slots):
    """Strings with NUL bytes, prefixes of each other and every length to a row's 24 bytes, in
    caches so small that they evict each other: a hit is always the very string, and the string
    just remembered is always a hit."""
    strings += [s + b"\0" for s in strings[:5] if len(s) < CHUNK_BYTES] + [s[:-1] for s in strings[:5] if len(s) > 1]
    cache = chunk_cache(slots)
    for data in strings:
        text = np.frombuffer(b"xy" + data + b"z", np.uint8)  # remembered from inside a larger text
        remember_chunk(cache, text, 2, 2 + len(data), _ids_of(data))
        assert _lookup(cache, data) == _ids_of(data).tolist()
        for other in strings:
            found = _lookup(cache, other)
            assert found is None or found == _ids_of(other).tolist()


def test_a_string_and_its_nul_padded_twin_are_different_rows():
    """`a` and `a\\0` pack into the same words and hash alike: the length in the key tells them apart."""
    cache = chunk_cache(2)
    remember_chunk(cache, np.frombuffer(b"a", np.uint8), 0, 1, np.array([7], np.int32))
    assert _lookup(cache, b"a") == [7] and _lookup(cache, b"a\0") is None and _lookup(cache, b"a\0\0") is None
    remember_chunk(cache, np.frombuffer(b"a\0", np.uint8), 0, 2, np.array([8], np.int32))
    assert _lookup(cache, b"a") == [7] and _lookup(cache, b"a\0") == [8]


def test_packed_reads_strings_at_the_end_of_the_array_byte_by_byte_with_the_same_words():
    """Every (start, length) of a 40-byte array, the last ones read without 8-byte loads: the oracle's words."""
    data = bytes(range(200, 240))
    array = np.frombuffer(data, np.uint8)
    for start in range(len(data)):
        for length in range(0, min(CHUNK_BYTES, len(data) - start) + 1):
            assert tuple(int(k) for k in packed(array, start, length)) == _words(data[start:start + length])


@functools.cache
def _xlmr() -> tuple[Tokenizer, SentencePieceFastTokenizer]:
    raw = XLMR.read_text(encoding="utf-8")
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    return real, SentencePieceFastTokenizer(Tokenizer.from_str(raw), raw)


def test_a_chunk_longer_than_the_work_buffers_asks_for_larger_ones():
    """The kernel allocates nothing: at a chunk its buffers cannot hold it stops and names the size it
    needs; called again from there with buffers of that size, it gives the real ids."""
    real, fast = _xlmr()
    text = "short words then " + "abcdefghij" * 12 + " and more"
    data = np.frombuffer(text.encode(), np.uint8)
    out, spans = np.empty(4 * len(data) + 64, np.int32), np.empty((len(data), 3), np.int64)
    n_out, n_spans, stop, need = encode_kernel(data, 0, *fast._tables_args, chunk_cache(64), out, 0, spans, 0,
                                               work_buffers(32))
    assert stop == text.index("abcdefghij") and need >= 120 and n_spans == 0
    n_out, n_spans, stop, need = encode_kernel(data, stop, *fast._tables_args, chunk_cache(64), out, n_out, spans,
                                               n_spans, work_buffers(int(need)))
    assert stop == len(data) and need == 0 and n_spans == 0
    assert out[:n_out].tolist() == real.encode(text, add_special_tokens=False).ids
    assert fast.encode(text * 3).tolist() == real.encode(text * 3, add_special_tokens=False).ids


_RUN_TEXT = st.lists(st.sampled_from(["a", "bc", "def", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x00",
                                      "\x1f", "\x08", "\u00e9", "\u2581", ".", "\u00a0", "\u3000", "x" * 9]),
                     max_size=40).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=_RUN_TEXT)
def test_whitespace_runs_found_eight_bytes_at_a_time_give_the_real_ids(text):
    """The chunk scan skips to the next byte below 0x21 eight bytes at a time: runs of every
    whitespace byte, control bytes below 0x21 that are no run byte, non-ASCII neighbours and texts
    ending within eight bytes of a run give the real tokenizer's ids."""
    real, fast = _xlmr()
    assert fast.tables.run_bytes[0x20]  # XLM-R cuts at whitespace runs: the scan under test
    for piece in (text, text + "word", "w" * 7 + text):
        assert fast.encode(piece).tolist() == real.encode(piece, add_special_tokens=False).ids


def test_the_scan_cuts_at_every_whitespace_run_byte_wherever_it_falls_in_eight():
    """Each of XLM-R's run bytes (tab, newline, form feed, space) at every offset of an eight-byte
    load, and runs of two, end a chunk: the words before and after are rows of their own in the
    cache (a missed cut would leave the ids right but make one longer chunk)."""
    real, fast = _xlmr()
    assert np.flatnonzero(fast.tables.run_bytes).tolist() == [0x09, 0x0A, 0x0C, 0x20]
    kept = fast.cache
    try:
        for run in ("\t", "\n", "\x0c", " ", " \n", "\t\t"):
            for k in range(1, 12):
                left, right = ("and" * 4)[:k], "next" + "y" * (k % 3)  # few ids: each fits a row
                text = f"{left}{run}{right}"
                fast.cache = chunk_cache(1 << 8)
                assert fast.encode(text).tolist() == real.encode(text, add_special_tokens=False).ids
                assert _lookup(fast.cache, left.encode()) is not None, (run, k)
                assert _lookup(fast.cache, right.encode()) is not None, (run, k)
    finally:
        fast.cache = kept
