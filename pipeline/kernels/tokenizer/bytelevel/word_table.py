"""The byte-level kernel's first word table: 32-byte entries, two to a cache line, seeded with the
vocabulary's one-token words, so that almost every word is found with one line read and no loop.

A word of up to FRONT_BYTES (15) bytes is its own key: its bytes packed little-endian in two uint64
(`word_cache.word_key`), its length in the top byte of the second (`front_key`), so a key of zeros
is still a word and no entry of length 0 (an empty one) matches. An entry is four uint64:

    k0, k1 | length << 56, id0 | count << 28 | seeded << 31 | id1 << 32, id2 | id3 << 32

(up to FRONT_IDS ids, each below ID_LIMIT). A set is one 64-byte line of two entries, chosen by
the top bits of a multiplicative hash of the key. A hit copies all four id slots unconditionally
and moves the output on by the entry's count (`front_ids`): no loop, no branch on the count.

The table is built for a tokenizer (`seeded_table`) holding every word of up to 15 bytes the model
makes one token (`tables.one_token_words`: what the kernel's own BPE makes of it, so an entry never
changes an id), placed in the order of their ids (BPE learns the frequent merges first, so the
frequent words get their set first); a word whose set is full is left out (BPE and the second
cache find it). Sized to its contents: the power of two of sets at or above the seeded words, so
the table is at most half full of them and most sets keep a way for the words a text brings
(`front_keep`: a new word takes an empty way, else a way not seeded). A table per cache, copied
from the tokenizer's (`ByteLevelCache`), which doubles it (`grown_table`) when the words the texts
bring keep finding no room, up to MAX_SETS sets.

Every word computed also goes to the second cache (`word_cache`, 64-byte records in a 32 MB
table), which the kernel reads after a miss here only where the set is marked in the overflow
bitmap (`overflowed`: the set once had no room for a word, or let one go); a miss in a set not
marked is a new word, merged at once (its second-cache set fetched meanwhile). A read there costs
a memory round trip: before the bitmap, the cold pass over the books made 156,000 of them, 39,000
after.

In the books 92% of words have up to 8 bytes, 8% 9 to 15; about 97% of words are one token of up
to 15 bytes, found here with one line read (a 50k-token vocabulary: 50,000 seeds, the table 4 MB
at first, 16 MB after the books; a warm pass misses 0.4% of its lookups).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.tokenizer.bytelevel.word_cache import RECORD_IDS, aligned_zeros

FRONT_BYTES = 15  # longest word the table holds (its length shares the second key word)
FRONT_IDS = 4  # most ids an entry holds
ID_LIMIT = 1 << 28  # ids an entry holds are below this (the count and seeded flag share the first id's word)
MIN_SETS = 1 << 12  # a table of few seeded words still keeps room for a text's words (256 KB)
MAX_SETS = 1 << 19  # 32 MB: more seeded words than sets leave the rarest out; a crowded table grows to it
ENTRY_WORDS = 4  # uint64 per entry: 32 bytes, two entries (a set) a cache line
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xC2B2AE3D27D4EB4F)
_LENGTH_SHIFT = np.uint64(56)
_ID_MASK = np.uint64(ID_LIMIT - 1)
_LOW_HALF = np.uint64(0xFFFFFFFF)
_SEEDED = np.uint64(1 << 31)


@kernel(inline="always")
def front_key(k1, n):
    """The second key word of a word of n (1 to FRONT_BYTES) bytes whose bytes 8 on are k1."""
    return k1 | (np.uint64(n) << _LENGTH_SHIFT)


@kernel(inline="always")
def front_shift(table):
    """The shift that maps a 64-bit hash to a set of `table` (64 - log2 of its sets)."""
    bits = 0
    while (1 << bits) < table.shape[0]:
        bits += 1
    return np.uint64(64 - bits)


@kernel(inline="always")
def front_set(k0, k1, shift):
    """The set (row of `table`) of the key (k0, k1 from `front_key`); `shift` from `front_shift`."""
    return np.int64((((k1 * _MIX) ^ k0) * _GOLDEN) >> shift)


@kernel(inline="always")
def front_ids(table, row, k0, k1, out, n_out):
    """Copies the ids of the word (k0, k1) found in set `row` to out[n_out:]; returns the new n_out,
    or -1 when neither way holds it. Writes FRONT_IDS slots of `out` whatever the count (the caller
    leaves room: the slots past the count are written over by the next words)."""
    in0 = (table[row, 0] == k0) & (table[row, 1] == k1)
    in1 = (table[row, 4] == k0) & (table[row, 5] == k1)
    if not (in0 | in1):
        return np.int64(-1)
    way = np.int64(in1) * ENTRY_WORDS
    first = table[row, 2 + way]
    rest = table[row, 3 + way]
    out[n_out] = np.int32(first & _ID_MASK)
    out[n_out + 1] = np.int32(first >> np.uint64(32))
    out[n_out + 2] = np.int32(rest & _LOW_HALF)
    out[n_out + 3] = np.int32(rest >> np.uint64(32))
    return n_out + np.int64((first >> np.uint64(28)) & np.uint64(7))


@kernel(inline="always")
def _entry_ids(ids, start, count, seeded):
    """The two value words of an entry of ids[start:start + count] (1 <= count <= FRONT_IDS)."""
    first = np.uint64(ids[start]) | (np.uint64(count) << np.uint64(28))
    if seeded:
        first |= _SEEDED
    if count > 1:
        first |= np.uint64(ids[start + 1]) << np.uint64(32)
    rest = np.uint64(0)
    if count > 2:
        rest = np.uint64(ids[start + 2])
    if count > 3:
        rest |= np.uint64(ids[start + 3]) << np.uint64(32)
    return first, rest


KEPT, PUSHED, NOT_KEPT, NOT_FOR_TABLE = 0, 1, 2, 3  # what `front_keep` did


@kernel(inline="always")
def front_keep(table, row, k0, k1, ids, start, count):
    """Keeps ids[start:start + count] as the word (k0, k1)'s in set `row` where it has room: an empty
    way (KEPT), else way 1 or way 0 unless seeded, its word pushed out (PUSHED: a seeded word never
    is); NOT_KEPT when both ways are seeded, NOT_FOR_TABLE when count > FRONT_IDS or an id is
    ID_LIMIT or more. The last two and PUSHED say the table is crowded (`ByteLevelCache` grows it)."""
    if count > FRONT_IDS:
        return NOT_FOR_TABLE
    for q in range(count):
        if ids[start + q] < 0 or ids[start + q] >= ID_LIMIT:
            return NOT_FOR_TABLE
    way = np.int64(-1)
    result = KEPT
    if table[row, 1] == 0:
        way = 0
    elif table[row, 5] == 0:
        way = ENTRY_WORDS
    elif table[row, 6] & _SEEDED == 0:
        way = ENTRY_WORDS
        result = PUSHED
    elif table[row, 2] & _SEEDED == 0:
        way = 0
        result = PUSHED
    if way < 0:
        return NOT_KEPT
    first, rest = _entry_ids(ids, start, count, False)
    table[row, way] = k0
    table[row, way + 1] = k1
    table[row, way + 2] = first
    table[row, way + 3] = rest
    return result


@kernel(inline="always")
def _place(table, row, k0, k1, first, rest):
    """Puts the entry in the first empty way of set `row`; returns whether one was empty."""
    way = np.int64(-1)
    if table[row, 1] == 0:
        way = 0
    elif table[row, 5] == 0:
        way = ENTRY_WORDS
    if way < 0:
        return False
    table[row, way] = k0
    table[row, way + 1] = k1
    table[row, way + 2] = first
    table[row, way + 3] = rest
    return True


@kernel()
def _seed(k0s, k1s, ids, table):
    """Places each word (k0s[i], k1s[i]) -> ids[i], in the given order, in the first empty way of its
    set; returns how many were placed (the others' sets were full)."""
    shift = front_shift(table)
    one = np.empty(1, dtype=np.int64)
    placed = 0
    for i in range(k0s.shape[0]):
        if ids[i] < 0 or ids[i] >= ID_LIMIT:
            continue
        one[0] = ids[i]
        first, rest = _entry_ids(one, 0, 1, True)
        if _place(table, front_set(k0s[i], k1s[i], shift), k0s[i], k1s[i], first, rest):
            placed += 1
    return placed


@kernel(inline="always")
def overflowed(flags, row):
    """Whether set `row` ever had no room for a word, or pushed one out (`mark_overflow`): only then
    can a word of that set be in the second cache and not in the table."""
    return (flags[row >> 6] >> np.uint64(row & 63)) & np.uint64(1) != 0


@kernel(inline="always")
def mark_overflow(flags, row):
    """Marks set `row` as one whose words may be in the second cache only (`overflowed`)."""
    flags[row >> 6] |= np.uint64(1) << np.uint64(row & 63)


@kernel()
def _move_words(old, records, table, flags):
    """Puts the words `old` took from texts (not its seeds), then those of the second cache's
    `records` (`word_cache`) of up to FRONT_BYTES bytes, into `table` where their sets have room,
    marking the sets of the others (`mark_overflow`): a word that is in neither is computed again."""
    shift = front_shift(table)
    for row in range(old.shape[0]):
        for way in range(0, 2 * ENTRY_WORDS, ENTRY_WORDS):
            if old[row, way + 1] != 0 and old[row, way + 2] & _SEEDED == 0:
                k0 = old[row, way]
                k1 = old[row, way + 1]
                where = front_set(k0, k1, shift)
                if not _place(table, where, k0, k1, old[row, way + 2], old[row, way + 3]):
                    mark_overflow(flags, where)
    ids = np.empty(RECORD_IDS + 1, dtype=np.int64)
    row = 0
    while row < records.shape[0]:
        meta = records[row, 3]
        n = np.int64(meta & np.uint64(0xFF))
        count = np.int64((meta >> np.uint64(8)) & np.uint64(0xFF))
        if 1 <= n <= FRONT_BYTES and count >= 1:
            k0 = records[row, 0]
            k1 = front_key(records[row, 1], n)
            where = front_set(k0, k1, shift)
            placed = False
            if count <= FRONT_IDS:
                ids[0] = np.int64(meta >> np.uint64(32))
                for q in range(1, count):
                    word = 4 + (q - 1) // 2
                    ids[q] = np.int64((records[row, word] >> np.uint64(32 * ((q - 1) % 2))) & _LOW_HALF)
                if ids[:count].max() < ID_LIMIT:
                    first, rest = _entry_ids(ids, 0, count, False)
                    placed = _place(table, where, k0, k1, first, rest)
            if not placed:
                mark_overflow(flags, where)
        row += 2 if count > RECORD_IDS and row % 2 == 0 else 1  # a wide entry spans both records of its set
    return table


def empty_table(sets: int) -> np.ndarray:
    """An empty table of `sets` sets (a power of two, at least 2): uint64, shape (sets, 8), 64-byte aligned."""
    if sets < 2 or sets & (sets - 1):
        raise ValueError(f"word table sets must be a power of two >= 2, got {sets}")
    return aligned_zeros(sets * 2 * ENTRY_WORDS).reshape(sets, 2 * ENTRY_WORDS)


def table_sets(words: int) -> int:
    """Sets of a table seeded with `words` words: the power of two at or above them (MIN_SETS to MAX_SETS)."""
    return min(MAX_SETS, max(MIN_SETS, 1 << max(0, int(words - 1).bit_length())))


def seed_words(k0: np.ndarray, k1: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The one-token words (k0, k1: their bytes packed little-endian; lengths 1 to FRONT_BYTES) as
    the seeds a table is built from: uint64, shape (n, 3) of (k0, `front_key` k1, id), in id order
    (ties in key order, so equal inputs in any order give the same seeds)."""
    if lengths.shape[0] and (lengths.min() < 1 or lengths.max() > FRONT_BYTES):
        raise ValueError(f"a one-token word of the word table has 1 to {FRONT_BYTES} bytes")
    tagged = k1.astype(np.uint64) | (lengths.astype(np.uint64) << _LENGTH_SHIFT)
    order = np.lexsort((k0, tagged, ids))
    return np.ascontiguousarray(np.stack((k0.astype(np.uint64)[order], tagged[order],
                                          ids.astype(np.uint64)[order]), axis=1).reshape(-1, 3))


def seeded_table(seeds: np.ndarray, sets: int | None = None) -> np.ndarray:
    """A table holding the seeds (`seed_words`) in `sets` sets (default `table_sets` of them)."""
    table = empty_table(table_sets(seeds.shape[0]) if sets is None else sets)
    _seed(np.ascontiguousarray(seeds[:, 0]), np.ascontiguousarray(seeds[:, 1]),
          seeds[:, 2].astype(np.int64), table)
    return table


def overflow_flags(sets: int) -> np.ndarray:
    """The bitmap of a table of `sets` sets that `overflowed` reads, none marked."""
    return np.zeros(sets // 64 + 1, dtype=np.uint64)


def grown_table(old: np.ndarray, seeds: np.ndarray, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(table, flags): a table of twice the sets of `old` (at most MAX_SETS) holding the seeds, then
    the words `old` took from texts and those of the second cache's `records` where their new sets
    have room; its overflow bitmap marks the sets of the others."""
    table = seeded_table(seeds, min(MAX_SETS, 2 * old.shape[0]))
    flags = overflow_flags(table.shape[0])
    _move_words(old, records, table, flags)
    return table, flags
