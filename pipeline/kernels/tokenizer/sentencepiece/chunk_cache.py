"""The SentencePiece kernels' cache of encoded byte strings (chunks of text, normalised words, BPE
parts and segments), shared by `encode` and `bpe_stream`.

A string of at most CHUNK_BYTES bytes is remembered with its ids in one 64-byte row, aligned to a
cache line, two ways per set (a slot and its neighbour): a repeated string costs one hash, one
memory line and a byte compare. Row layout, in the row's own units: uint64 0 the key (the
string's FNV-1a hash's high bits, flags and the length: `row_key`), bytes 8..31 the string, int32
8 the count of ids, int32 9..15 the ids. A hit is checked byte for byte, so the cache changes the
speed, never the ids.

Two ways of keying a row share the table: `encode` packs a string into three little-endian words,
zero beyond its length (`packed`), hashes the words (`packed_hash`) and compares a row's key and
three words at once (`probe_packed`, `insert_packed` writing the zeros too): no loop over bytes, and
the chunk scan no longer hashes byte by byte. `bpe_stream` hashes bytes (FNV-1a) and compares them
one by one (`probe`, `insert`). A row one way writes is found the other way only when its hash
happens to agree; either way a hit is the very string (its length is in the key and its bytes are
compared), so sharing costs at most a miss.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import helper, kernel
from pipeline.kernels.common.packing import PACKED_BYTES, packed24

ROW_BYTES = 64  # one cache line per row
CHUNK_BYTES = PACKED_BYTES  # row bytes 8..31: the string (24 bytes, `packed`)
CHUNK_IDS = 7  # row int32 8: count, 9..15: ids
BYTES_AT = 8  # in bytes
COUNT_AT = 8  # in int32 units
HASH_BITS = np.uint64(0xFFFFFFFFFFFFFF00)  # a key: the hash's high bits, flags, the length (<= 24 < 0x40)
WORD_FLAG = np.uint64(0x80)  # the row holds a normalised word or part (the model's input), not raw text
STREAM_FLAG = np.uint64(0x40)  # the row holds a stream segment without the text's prefix (`bpe_stream`)
NO_FLAGS = np.uint64(0)
_MIX_1 = np.uint64(0x9E3779B97F4A7C15)
_MIX_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX_3 = np.uint64(0x165667B19E3779F9)
_HALF = np.uint64(32)


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


packed = packed24  # (k0, k1, k2) of data[start:start + length], 0 <= length <= CHUNK_BYTES: `common.packing`


@kernel(inline="always")
def packed_hash(k0, k1, k2):
    """A 64-bit hash of a packed string (its length is in the row's key, not here): multiply and
    fold, the high half folded down last so that the set (the low bits) depends on every byte."""
    h = (k0 ^ _MIX_3) * _MIX_1
    h = (h ^ (h >> _HALF) ^ k1) * _MIX_2
    h = (h ^ (h >> _HALF) ^ k2) * _MIX_1
    return h ^ (h >> _HALF)


@kernel(inline="always")
def probe_packed(cache, slot, key, k0, k1, k2):
    """The row of the set at `slot` holding `key` and the packed string (k0, k1, k2), or -1."""
    if cache[slot, 0] == key and cache[slot, 1] == k0 and cache[slot, 2] == k1 and cache[slot, 3] == k2:
        return slot
    if cache[slot + 1, 0] == key and cache[slot + 1, 1] == k0 and cache[slot + 1, 2] == k1 \
            and cache[slot + 1, 3] == k2:
        return slot + 1
    return np.int64(-1)


@helper
def insert_packed(cache, cache_ints, slot, key, k0, k1, k2, out, first, stop):
    """Remember the packed string (k0, k1, k2) -> out[first:stop] in the set at `slot` (when the ids
    fit a row; the string's length, at most CHUNK_BYTES, is in `key`), the zeros beyond it too."""
    made = stop - first
    if made > CHUNK_IDS:
        return
    if cache[slot, 0] != 0 and cache[slot + 1, 0] == 0:
        slot += 1  # keep what the first way holds while the second is free
    cache[slot, 0] = key
    cache[slot, 1] = k0
    cache[slot, 2] = k1
    cache[slot, 3] = k2
    cache_ints[slot, COUNT_AT] = made
    for k in range(made):
        cache_ints[slot, COUNT_AT + 1 + k] = out[first + k]


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
    k0, k1, k2 = packed(text, start, length)
    h = packed_hash(k0, k1, k2)
    insert_packed(cache, cache.view(np.int32), set_of(h, cache), row_key(h, length, NO_FLAGS), k0, k1, k2, ids,
                  np.int64(0), ids.shape[0])
