"""A cache of tokenized words in which a hit reads one cache line: the byte-level BPE kernel's memory.

A word of up to WORD_BYTES bytes is its own key: its bytes packed little-endian in three uint64
(`word_key`, the shared `common.packing.packed24`: one unaligned 8-byte load each, a mask, no loop,
no byte compare). A record is 64 bytes, one cache line: the three key words, then `length | count <<
8 | first id << 32`, then up to RECORD_IDS - 1 more ids two to a uint64. Records are in sets of two
(two-way set associative: a new word goes to way 1 unless way 0 is free, a hit in way 1 moves to way
0), the set chosen by the top bits of a multiplicative hash of the key. A word of more ids (up to
MAX_IDS, so every word of up to WORD_BYTES bytes: CJK runs of byte-level tokens) takes both records
of its set, its ids running on into way 1 (a *wide* entry, only ever in way 0; way 1 is then not a
record).

A cache never changes ids: it only remembers what the kernel computed for a word. It is the second
cache of the words of up to 15 bytes (the word table, `word_table`, is the first: the kernel looks
here after a miss there only when the table's set has let a word go, and fetches the set while a
new word is merged) and the only one of words of 16 to WORD_BYTES bytes, whose sets the kernel
prefetches when it finds them some words ahead of their lookup (`common/prefetch.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.packing import PACKED_BYTES, packed24

WORD_BYTES = PACKED_BYTES  # longest word the cache holds (its key is three uint64: 24 bytes)
RECORD_IDS = 9  # most ids one record holds
MAX_IDS = 25  # most ids a word's entry holds: a wide entry takes both records of its set (>= WORD_BYTES)
RECORD_WORDS = 8  # uint64 per record: 64 bytes
SETS = 1 << 18  # sets of two records: 32 MB. 49 books have 154,000 distinct words; with 16 MB, 40,000 of the
# 2 million lookups of a pass over them found their word evicted, and BPE again costs about 1 us a word
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX_2 = np.uint64(0x165667B19E3779F9)
_LOW_BYTE = np.uint64(0xFF)
_LOW_HALF = np.uint64(0xFFFFFFFF)


word_key = packed24  # (k0, k1, k2) of text[start:start + n], 1 <= n <= WORD_BYTES: `common.packing`


@kernel(inline="always")
def set_shift(records):
    """The shift that maps a 64-bit hash to a set of `records` (64 - log2 of the number of sets)."""
    bits = 0
    while (1 << bits) < records.shape[0] // 2:
        bits += 1
    return np.uint64(64 - bits)


@kernel(inline="always")
def word_set(k0, k1, k2, n, shift):
    """The first row of the set of the word (k0, k1, k2, n) (`shift` from `set_shift`)."""
    mixed = (k0 ^ (k1 * _MIX_1) ^ (k2 * _MIX_2) ^ np.uint64(n)) * _GOLDEN
    return np.int64(mixed >> shift) * 2


@kernel(inline="always")
def _hit(records, row, k0, k1, k2, n, out, n_out):
    meta = records[row, 3]
    if (records[row, 0] != k0 or (meta & _LOW_BYTE) != np.uint64(n) or records[row, 1] != k1
            or records[row, 2] != k2):
        return -1
    count = np.int64((meta >> np.uint64(8)) & _LOW_BYTE)
    out[n_out] = np.int32(meta >> np.uint64(32))
    for q in range(1, count):
        word = 4 + (q - 1) // 2  # past the record's 8 words: the next row (a wide entry's second half)
        out[n_out + q] = np.int32((records[row + (word >> 3), word & 7] >> np.uint64(32 * ((q - 1) % 2)))
                                  & _LOW_HALF)
    return n_out + count


@kernel(inline="always")
def cached_ids(records, row, k0, k1, k2, n, out, n_out):
    """Copies the cached ids of the word to out[n_out:]; returns the new n_out, or -1 on a miss.
    A hit in way 1 swaps the set's two records, so that the word last found is in way 0."""
    done = _hit(records, row, k0, k1, k2, n, out, n_out)
    if done < 0 and (records[row, 3] >> np.uint64(8)) & _LOW_BYTE <= np.uint64(RECORD_IDS):
        done = _hit(records, row + 1, k0, k1, k2, n, out, n_out)  # way 1, unless way 0 spills into it
        if done >= 0:
            for q in range(RECORD_WORDS):
                word = records[row, q]
                records[row, q] = records[row + 1, q]
                records[row + 1, q] = word
    return done


@kernel(inline="always")
def remember(records, row, k0, k1, k2, n, ids, start, count):
    """Caches ids[start:start + count] (1 <= count <= MAX_IDS) as the ids of the word: in way 0 when
    it is empty or wide (which is dropped), else in way 1 (its word dropped); in both ways when they
    are more than RECORD_IDS (a wide entry, only ever in way 0). A new word takes way 1 so that the
    word in way 0 (found again since it came: `cached_ids` moves a hit in way 1 there) stays: three
    words that take turns in one set would otherwise each push out the one to come next, every one
    a miss (about 10,000 words a pass over the books were, with a 50,000-token vocabulary)."""
    meta = records[row, 3]
    wide_before = (meta >> np.uint64(8)) & _LOW_BYTE > np.uint64(RECORD_IDS)
    if count > RECORD_IDS or wide_before:
        for q in range(RECORD_WORDS):
            records[row + 1, q] = 0
    elif meta != 0:
        row += 1
    for q in range(RECORD_WORDS):
        records[row, q] = 0
    records[row, 0] = k0
    records[row, 1] = k1
    records[row, 2] = k2
    records[row, 3] = np.uint64(n) | (np.uint64(count) << np.uint64(8)) | (np.uint64(ids[start]) << np.uint64(32))
    for q in range(1, count):
        word = 4 + (q - 1) // 2
        records[row + (word >> 3), word & 7] |= np.uint64(ids[start + q]) << np.uint64(32 * ((q - 1) % 2))


HUGE_PAGE = 1 << 21


def aligned_zeros(words: int) -> np.ndarray:
    """uint64 zeros, 64-byte aligned; one of 2 MB or more starts at a 2 MB boundary, so that Linux
    backs all of it with huge pages (numpy asks for them; a random probe of a 4 KB-page table of
    many MB pays a page walk: the TLB holds a few MB of such pages)."""
    size = words * 8
    align = HUGE_PAGE if size >= HUGE_PAGE else 64
    raw = np.zeros((size + align) // 8, dtype=np.uint64)
    skip = (-raw.ctypes.data % align) // 8
    return raw[skip:skip + words]


@dataclass(frozen=True)
class PackedWordCache:
    """Tokenized words remembered between kernel calls (bounded: 2 x sets words).

    Attributes:
        records: uint64, shape (2 * sets, RECORD_WORDS), 64-byte aligned (see the module docstring);
            a record of length 0 is empty.
    """

    records: np.ndarray

    @classmethod
    def empty(cls, sets: int = SETS) -> PackedWordCache:
        """A cache of `sets` sets of two records (a power of two, at least 2)."""
        if sets < 2 or sets & (sets - 1):
            raise ValueError(f"cache sets must be a power of two >= 2, got {sets}")
        rows = 2 * sets
        return cls(records=aligned_zeros(rows * RECORD_WORDS).reshape(rows, RECORD_WORDS))
