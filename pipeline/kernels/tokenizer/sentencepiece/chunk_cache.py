"""The SentencePiece kernels' cache of encoded byte strings (chunks of text, normalised words, BPE
parts and segments), shared by `encode` and `bpe_stream`.

A string of at most CHUNK_BYTES bytes is remembered with its ids in one 64-byte row, aligned to a
cache line, two ways per set (a slot and its neighbour): a repeated string costs one hash, one
memory line and a byte compare. Row layout, in the row's own units: uint64 0 the key (the
string's FNV-1a hash's high bits, flags and the length: `row_key`), bytes 8..31 the string, int32
8 the count of ids, int32 9..15 the ids. A hit is checked byte for byte, so the cache changes the
speed, never the ids.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.hash_table import hash_bytes
from pipeline.kernels.common.jit import helper, kernel

ROW_BYTES = 64  # one cache line per row
CHUNK_BYTES = 24  # row bytes 8..31: the string
CHUNK_IDS = 7  # row int32 8: count, 9..15: ids
BYTES_AT = 8  # in bytes
COUNT_AT = 8  # in int32 units
HASH_BITS = np.uint64(0xFFFFFFFFFFFFFF00)  # a key: the hash's high bits, flags, the length (<= 24 < 0x40)
WORD_FLAG = np.uint64(0x80)  # the row holds a normalised word or part (the model's input), not raw text
STREAM_FLAG = np.uint64(0x40)  # the row holds a stream segment without the text's prefix (`bpe_stream`)
NO_FLAGS = np.uint64(0)


def chunk_cache(slots: int) -> np.ndarray:
    """An empty cache of `slots` rows (a power of two): uint64, shape (slots, 8), each row one
    64-byte-aligned cache line."""
    if slots < 2 or slots & (slots - 1):
        raise ValueError(f"chunk cache slots must be a power of two >= 2, got {slots}")
    raw = np.zeros(slots * 8 + 8, dtype=np.uint64)
    skip = (-raw.ctypes.data % ROW_BYTES) // 8
    return raw[skip:skip + slots * 8].reshape(slots, 8)


@kernel(inline="always")
def set_of(h, cache):
    """The first row of the two-way set of a string whose hash is h."""
    return np.int64(h & np.uint64(cache.shape[0] - 1)) & ~np.int64(1)


@kernel(inline="always")
def row_key(h, length, flags):
    """The key of a string of `length` bytes whose hash is h, with `flags` (WORD_FLAG, STREAM_FLAG)."""
    return (h & HASH_BITS) | flags | np.uint64(length)


@kernel(inline="always")
def cached_count(cache_ints, row):
    """The number of ids in `row`."""
    return cache_ints[row, COUNT_AT]


@kernel(inline="always")
def copy_ids(cache_ints, row, out, n_out):
    """Append the ids of `row` to out from n_out (room checked by the caller); returns the new n_out."""
    for k in range(cache_ints[row, COUNT_AT]):
        out[n_out + k] = cache_ints[row, COUNT_AT + 1 + k]
    return n_out + cache_ints[row, COUNT_AT]


@helper
def probe(cache, cache_bytes, slot, key, data, start, length):
    """The row of the set at `slot` holding `key` and data[start:start+length], or -1."""
    for way in range(2):
        if cache[slot + way, 0] == key:
            same = True
            for k in range(length):
                if cache_bytes[slot + way, BYTES_AT + k] != data[start + k]:
                    same = False
                    break
            if same:
                return slot + way
    return -1


@helper
def insert(cache, cache_bytes, cache_ints, slot, key, data, start, length, out, first, stop):
    """Remember data[start:start+length] -> out[first:stop] in the set at `slot` (when it fits a row)."""
    made = stop - first
    if made > CHUNK_IDS or length > CHUNK_BYTES:
        return
    if cache[slot, 0] != 0 and cache[slot + 1, 0] == 0:
        slot += 1  # keep what the first way holds while the second is free
    cache[slot, 0] = key
    for k in range(length):
        cache_bytes[slot, BYTES_AT + k] = data[start + k]
    cache_ints[slot, COUNT_AT] = made
    for k in range(made):
        cache_ints[slot, COUNT_AT + 1 + k] = out[first + k]


@kernel()
def remember_chunk(cache, text, start, stop, ids):
    """Put the ids (int32) the real tokenizer gave text[start:stop] (a fallback span, encoded as a
    text of its own) in the cache, as the kernel would have for a chunk it encoded itself: the next
    time this chunk comes, it is a hit. Spans longer than a row takes are left out."""
    length = stop - start
    if length > CHUNK_BYTES or ids.shape[0] > CHUNK_IDS or length == 0:
        return
    h = hash_bytes(text, start, stop)
    insert(cache, cache.view(np.uint8), cache.view(np.int32), set_of(h, cache), row_key(h, length, NO_FLAGS), text,
           start, length, ids, np.int64(0), ids.shape[0])
