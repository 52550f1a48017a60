"""The shared 3-word byte packer (`common.packing.packed24`) the byte-level word cache and the
SentencePiece chunk cache key their hits by, against the plain oracle `int.from_bytes`, at every
place a string can sit in an array, the end of the array included (where it must read nothing past
the last byte: the array here ends at a page that cannot be read)."""

from __future__ import annotations

import ctypes
import mmap

import numba
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.common.packing import PACKED_BYTES, packed24
from pipeline.kernels.tokenizer.bytelevel.word_cache import word_key
from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import packed


@numba.njit(cache=False)  # not cached: a cache outside pipeline/kernels would keep a changed packer's old code
def _pack_all(data, starts, lengths, out):
    for i in range(starts.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = packed24(data, starts[i], lengths[i])


def _oracle(data: bytes, start: int, n: int) -> tuple[int, int, int]:
    raw = data[start:start + n].ljust(PACKED_BYTES, b"\0")
    return tuple(int.from_bytes(raw[8 * w:8 * w + 8], "little") for w in range(3))


def _packs(data: np.ndarray, places: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    starts = np.array([s for s, _ in places], dtype=np.int64)
    lengths = np.array([n for _, n in places], dtype=np.int64)
    out = np.zeros((len(places), 3), dtype=np.uint64)
    _pack_all(data, starts, lengths, out)
    return [tuple(int(v) for v in row) for row in out]


def test_both_caches_key_by_the_one_shared_packer() -> None:
    assert word_key is packed24
    assert packed is packed24


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=80), st.data())
def test_packed_bytes_match_the_oracle_wherever_the_string_sits(data: bytes, draw: st.DataObject) -> None:
    """Strings of 0 to 24 bytes at random places, and every string that ends at the array's end
    (the byte-at-a-time tail path), bytes of 0x00 and 0xFF included (a mask off by a byte shows)."""
    data = data + bytes(draw.draw(st.lists(st.sampled_from([0, 0xFF, 0x80]), max_size=8)))
    array = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(0, dtype=np.uint8)
    places = [(len(data) - n, n) for n in range(min(len(data), PACKED_BYTES) + 1)]
    for _ in range(20):
        start = draw.draw(st.integers(0, len(data)))
        places.append((start, draw.draw(st.integers(0, min(PACKED_BYTES, len(data) - start)))))
    assert _packs(array, places) == [_oracle(data, s, n) for s, n in places]


def test_a_string_at_the_end_of_the_array_reads_nothing_past_it() -> None:
    """The array's last byte is the last readable byte before a page that faults on any read: an
    8-byte load past the end (the fast path taken where only the tail is safe, or a load for an
    empty string) crashes the process."""
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    anchor = ctypes.c_char.from_buffer(region)
    base = ctypes.addressof(anchor)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0) == 0, ctypes.get_errno()
    try:
        payload = bytes(range(1, 41))
        whole = np.frombuffer(region, dtype=np.uint8, count=page)
        whole[page - len(payload):] = np.frombuffer(payload, dtype=np.uint8)
        data = whole[page - len(payload):]
        places = [(len(payload) - n, n) for n in range(PACKED_BYTES + 1)] + [(len(payload), 0)]
        assert _packs(data, places) == [_oracle(payload, s, n) for s, n in places]
    finally:
        libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), mmap.PROT_READ | mmap.PROT_WRITE)
        del whole, data, anchor
        region.close()
