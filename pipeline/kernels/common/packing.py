"""Short byte strings packed in three uint64: the cache key both the byte-level word cache
(`tokenizer.bytelevel.word_cache.word_key`) and the SentencePiece chunk cache
(`tokenizer.sentencepiece.chunk_cache.packed`) compare a hit by.

`packed24(data, start, n)` is data[start:start + n] (0 <= n <= PACKED_BYTES) as three little-endian
words, zero beyond n: one unaligned 8-byte load per word (`load8`) and a mask, no loop, no byte
compare. A string near the end of `data` is read one byte at a time (`packed_tail`), so nothing past
the array is ever read; an empty string is three zeros and reads nothing.

All three are inlined (`inline="always"`) and return scalars: a call that allocates, or is not
inlined, in a kernel's word loop made every word of the byte-level loop about 10 ns slower (the
loop's values no longer kept in registers across it).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8

PACKED_BYTES = 24  # longest string `packed24` packs (three uint64)
_ALL_BITS = np.uint64(0xFFFFFFFFFFFFFFFF)
_ZERO = np.uint64(0)


@kernel(inline="always")
def low_bytes(word, n):
    """The low n (1 <= n <= 8) bytes of word, the others zero (n = 0 is not allowed: a shift by 64)."""
    return word & (_ALL_BITS >> np.uint64(64 - 8 * n))


@kernel(inline="always")
def packed_tail(data, start, n):
    """`packed24` of data[start:start + n] read one byte at a time (a string near the end of data)."""
    k0 = _ZERO
    k1 = _ZERO
    k2 = _ZERO
    for q in range(n):
        byte = np.uint64(data[start + q]) << np.uint64(8 * (q & 7))
        if q < 8:
            k0 |= byte
        elif q < 16:
            k1 |= byte
        else:
            k2 |= byte
    return k0, k1, k2


@kernel(inline="always")
def packed24(data, start, n):
    """(k0, k1, k2): the bytes of data[start:start + n] (uint8 array, 0 <= n <= PACKED_BYTES, in
    bounds) packed little-endian in three uint64, zero beyond n. Whole 8-byte loads where `data`
    has the bytes; nothing past its end is read, and nothing at all for n = 0."""
    if n <= 0 or start + ((n + 7) & -8) > data.shape[0]:
        return packed_tail(data, start, n)
    if n <= 8:
        return low_bytes(load8(data, start), n), _ZERO, _ZERO
    if n <= 16:
        return load8(data, start), low_bytes(load8(data, start + 8), n - 8), _ZERO
    return load8(data, start), load8(data, start + 8), low_bytes(load8(data, start + 16), n - 16)
