"""Byte-level BPE (GPT-2, RoBERTa, ModernBERT, Llama-3/OLMo style) in one jitted pass over UTF-8 bytes.

The kernel reproduces a `ByteLevel` pre-tokenizer (or a `Split` regex followed by a regex-less
`ByteLevel`) and a `BPE` model, from tables built by `pipeline.tokenizer.bytelevel.fast`:

- the pre-tokenizer's tables (`pipeline.kernels.tokenizer.bytelevel.pretokenize`: a per-code-point
  class table asked of the tokenizer's own regex engine, the supported patterns written out);
- the vocabulary keyed by raw bytes (the byte-to-unicode alphabet undone), the merges keyed by
  pair of ids with their rank and result, and each byte's initial id as the first, a middle, the
  last or the only symbol of a word (the `continuing_subword_prefix` and `end_of_word_suffix`
  are in those ids).

A word (pre-token) is tokenized as `BPE.merge_word` does: `ignore_merges` first looks the whole
word up, else its bytes become symbols and the adjacent pair of lowest (rank, position) is merged
until none is in the merges. A word of up to 15 bytes is looked up in the word table
(`word_table`: 32-byte entries, two to a cache line, seeded with every such word the model makes one
token, `tables.one_token_words`, and taking the words of up to 4 ids the texts bring), about 97%
of the words of books found there with one line read; the others of up to WORD_BYTES bytes are
kept in the second cache (`word_cache`: 64-byte records, the word's bytes its key), so a repeated
word costs a packed load and a compare. A word the tables cannot vouch for (a byte without
an initial id, so `[UNK]`/byte fallback decide, or longer than MAX_KERNEL_WORD) is returned as a
*fallback word* for the real model, its ids spliced in at the recorded position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hash_table import FNV_OFFSET, hash_step, lookup
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.prefetch import prefetch_row
from pipeline.kernels.tokenizer.bytelevel.pretokenize import (  # noqa: F401 (the family's names, imported from here)
    GPT2,
    GPT2_PATTERN,
    LETTER,
    LLAMA3,
    LLAMA3_PATTERN,
    N_CODE_POINTS,
    NUMBER,
    OTHER,
    PATTERNS,
    SPACE,
    WINDOW_REACH,
    later_start,
    pattern_window,
    word_end,
)
from pipeline.kernels.tokenizer.bytelevel.regex_program import NO_PROGRAM, PROGRAM, new_state, program_word_end
from pipeline.kernels.tokenizer.bytelevel.word_cache import (
    MAX_IDS,
    SETS,
    WORD_BYTES,
    PackedWordCache,
    cached_ids,
    remember,
    set_shift,
    word_key,
    word_set,
)
from pipeline.kernels.tokenizer.bytelevel.word_table import (
    FRONT_BYTES,
    KEPT,
    MAX_SETS,
    PUSHED,
    empty_table,
    front_ids,
    front_keep,
    front_key,
    front_set,
    front_shift,
    grown_table,
    mark_overflow,
    overflow_flags,
    overflowed,
    seeded_table,
)

MAX_KERNEL_WORD = 256  # longer words go to the real model (its merge loop is O(n log n), ours O(n^2))
NO_MERGE = np.int32(0x7FFFFFFF)
WINDOW_BYTES = 1 << 20  # words tokenized a kernel call (its buffers grow with it)
AHEAD = 32  # words found (and their table slots prefetched) before the first of them is looked up
_FRONT, _CACHED, _LONG = 0, 1, 2  # a word of up to FRONT_BYTES bytes (the word table first), up to WORD_BYTES, longer


@kernel(inline="always")
def _merge_lookup(a, b, merges):
    """(rank, new id) of merging ids a and b, or (-1, -1): one 16-byte slot holds a merge's key and
    both values, so a lookup touches one cache line."""
    key = ((np.uint64(a) << np.uint64(32)) | np.uint64(b)) + np.uint64(1)
    mask = merges.shape[0] - 1
    slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask  # as _merge_slot
    while merges[slot, 0] != 0:
        if merges[slot, 0] == key:
            value = merges[slot, 1]
            return np.int32(value & np.uint64(0xFFFFFFFF)), np.int32(value >> np.uint64(32))
        slot = (slot + 1) & mask
    return np.int32(-1), np.int32(-1)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LOW_HALF = np.uint64(0xFFFFFFFF)


@kernel(inline="always")
def _merge_slot(a, b, mask):
    """The first slot `_merge_lookup` probes for the pair (a, b)."""
    key = ((np.uint64(a) << np.uint64(32)) | np.uint64(b)) + np.uint64(1)
    return np.int64((key * _GOLDEN) >> np.uint64(40)) & mask


@kernel(inline="always")
def _pair(symbols, q, merges, ranks, news):
    """Looks up the pair (symbols[q], symbols[q + 1]) into ranks[q], news[q] (NO_MERGE when none)."""
    rank, new_id = _merge_lookup(symbols[q], symbols[q + 1], merges)
    ranks[q] = rank if rank >= 0 else NO_MERGE
    news[q] = new_id


@kernel(inline="always")
def _fetch_after(symbols, q, count, merges, ranks, news, mask):
    """Prefetches the slots of the two pairs that merging pair q would make (with its neighbours),
    so that the lookups after that merge find them in cache: the merge loop's lookups otherwise
    wait for one another, each a cache miss of the large merge table."""
    if ranks[q] != NO_MERGE:
        if q > 0:
            prefetch_row(merges, _merge_slot(symbols[q - 1], news[q], mask))
        if q + 2 < count:
            prefetch_row(merges, _merge_slot(news[q], symbols[q + 2], mask))


@kernel()
def _bpe(text, start, stop, initial, merges, byte_pairs, symbols, ranks, news, out, n_out):
    """BPE of the word text[start:stop] into out[n_out:]; returns the new n_out, or -1 when a byte
    has no initial id (the real model decides what [UNK] or byte fallback make of it).

    The pair of lowest (rank, position) is merged until no pair is a merge, as `BPE.merge_word`
    does; each pair's rank is looked up once (the bytes' pairs in `byte_pairs` when it has them)
    and only the two pairs around a merge again, their slots prefetched when the pair they come
    from was looked up (`_fetch_after`)."""
    n = stop - start
    for q in range(n):
        variant = 1  # a middle symbol
        if n == 1:
            variant = 3
        elif q == 0:
            variant = 0
        elif q == n - 1:
            variant = 2
        symbol = initial[variant, text[start + q]]
        if symbol < 0:
            return -1
        symbols[q] = symbol
    if byte_pairs.shape[0]:
        for q in range(n - 1):
            value = byte_pairs[(np.int64(text[start + q]) << 8) | np.int64(text[start + q + 1])]
            ranks[q] = np.int32(value & _LOW_HALF)
            news[q] = np.int32(value >> np.uint64(32))
    else:
        for q in range(n - 1):
            _pair(symbols, q, merges, ranks, news)
    mask = merges.shape[0] - 1
    for q in range(n - 1):
        _fetch_after(symbols, q, n, merges, ranks, news, mask)
    count = n
    while count > 1:
        low = ranks[0]
        for q in range(1, count - 1):  # a min without branches, then its first position
            low = min(low, ranks[q])
        if low == NO_MERGE:
            break
        best = 0
        while ranks[best] != low:
            best += 1
        symbols[best] = news[best]
        for q in range(best + 1, count - 1):
            symbols[q] = symbols[q + 1]
        for q in range(best + 1, count - 2):
            ranks[q] = ranks[q + 1]
            news[q] = news[q + 1]
        count -= 1
        if best > 0:
            _pair(symbols, best - 1, merges, ranks, news)
            _fetch_after(symbols, best - 1, count, merges, ranks, news, mask)
        if best < count - 1:
            _pair(symbols, best, merges, ranks, news)
            _fetch_after(symbols, best, count, merges, ranks, news, mask)
    for q in range(count):
        out[n_out + q] = symbols[q]
    return n_out + count


@kernel(_nrt=False)  # no reference counting: it cost a third of a warm pass (see `_work_buffers`)
def _encode_kernel(text, classes, swar_letters, ascii_masks, fold, pattern, ignore_merges, initial, merges,
                   byte_pairs, v_blob, v_starts, v_lengths, v_ids, v_slots, max_key, front, flags, crowding,
                   program, records, out, work,
                   fallback, begin, limit):
    """Pre-tokenize and BPE the words of valid UTF-8 text that start in [begin, limit); returns
    (n_out, n_fallback, where the last word ends). `begin` is 0 or where such a call's last word
    ended: the regexes look only forward, so their matches from there are those of the whole text.
    fallback[k] = (byte start, byte stop, position in out) of a word left to the real model.
    out needs room for limit - begin + MAX_KERNEL_WORD ids (the last word may end past limit).

    A word of up to FRONT_BYTES bytes is looked up in the word table `front` (one cache line), then,
    where its set ever let a word go (`flags`), in the second cache `records`; a longer one of up to
    WORD_BYTES bytes in `records` only; on a miss it is looked up in the vocabulary (`ignore_merges`)
    or merged, and remembered (in both, where the table has room: `crowding` counts the words it had
    none for, so that the caller grows it). The words are found AHEAD words before they are looked
    up, and their table sets prefetched when found, so that several lookups' memory fetches overlap
    instead of following one another (the pre-tokenizer does not depend on the cache, so the order
    changes nothing else).

    Compiled without numba's reference counting (NRT), so it allocates nothing (its buffers are
    `work`): with it, every array an inlined helper takes was counted in and out around the call,
    atomic increments and decrements the optimizer could not remove from the branchy word loop."""
    symbols, ranks, news, ahead_stops, ahead_kind, ahead_where, ahead_keys = work  # `_work_buffers`
    n_out = 0
    n_fallback = 0
    size = text.shape[0]
    shift = set_shift(records)
    front_bits = front_shift(front)
    found_end = begin  # where the words found so far end
    n_found = 0  # words found
    n_done = 0  # words tokenized
    position = begin  # where the next word to tokenize starts
    masked = ascii_masks and pattern != PROGRAM  # a compiled Split chain has its own scanner
    base = np.int64(-1)  # the pre-tokenizer's window (none yet)
    starts = untrusted = np.uint64(0)
    while True:
        while n_found - n_done < AHEAD and found_end < limit:
            stop = np.int64(-1)
            if masked and found_end + WINDOW_REACH <= size:  # 64 bytes at a time (written out: numba's inlining of
                bit = found_end - base  # a function returning the window state made this loop 3 times slower)
                if base < 0 or bit > 62:
                    base = found_end
                    starts, untrusted = pattern_window(text, found_end, classes, pattern)
                    bit = 0
                stop = later_start(starts, untrusted, bit)
                if stop == 64 and bit > 0:  # the word may run past the window: one that starts with it
                    base = found_end
                    starts, untrusted = pattern_window(text, found_end, classes, pattern)
                    stop = later_start(starts, untrusted, 0)
                stop = base + stop if 0 <= stop < 64 else np.int64(-1)
            if stop < 0 and pattern == PROGRAM:  # a compiled Split chain (`regex_program`)
                stop = program_word_end(text, found_end, size, program)
            elif stop < 0:
                stop = word_end(text, found_end, size, classes, fold, pattern, swar_letters)
            n = stop - found_end
            slot = n_found & (AHEAD - 1)
            kind = _LONG
            if n <= WORD_BYTES:
                k0, k1, k2 = word_key(text, found_end, n)
                ahead_keys[slot, 0] = k0
                ahead_keys[slot, 1] = k1
                ahead_keys[slot, 2] = k2
                if n <= FRONT_BYTES:
                    kind = _FRONT
                    where = front_set(k0, front_key(k1, n), front_bits)
                    prefetch_row(front, where)
                else:
                    kind = _CACHED
                    where = word_set(k0, k1, k2, n, shift)
                    prefetch_row(records, where)
                    prefetch_row(records, where + 1)
                ahead_where[slot] = where
            ahead_kind[slot] = kind
            ahead_stops[slot] = stop
            found_end = stop
            n_found += 1
        if n_done == n_found:
            break
        slot = n_done & (AHEAD - 1)
        n_done += 1
        start = position
        stop = ahead_stops[slot]
        kind = ahead_kind[slot]
        position = stop
        n = stop - start
        row = front_row = np.int64(-1)
        k0 = k1 = k2 = np.uint64(0)
        if kind != _LONG:
            k0 = ahead_keys[slot, 0]
            k1 = ahead_keys[slot, 1]
            k2 = ahead_keys[slot, 2]
            row = ahead_where[slot]
            if kind == _FRONT:
                done = front_ids(front, row, k0, front_key(k1, n), out, n_out)
                if done >= 0:
                    n_out = done
                    continue
                front_row = row
                row = word_set(k0, k1, k2, n, shift)
            done = -1
            if front_row < 0 or overflowed(flags, front_row):  # else a word of that set is in the table or new
                done = cached_ids(records, row, k0, k1, k2, n, out, n_out)
            else:  # new: its set of the second cache is fetched while it is merged (`remember` reads it)
                prefetch_row(records, row)
                prefetch_row(records, row + 1)
            if done >= 0:  # back into the word table, where another word took its place
                if front_row >= 0 and front_keep(front, front_row, k0, front_key(k1, n), out, n_out,
                                                 done - n_out) == PUSHED:
                    crowding[0] += 1
                n_out = done
                continue
        done = -1
        if ignore_merges and n <= max_key:
            h = FNV_OFFSET
            for q in range(start, stop):
                h = hash_step(h, text[q])
            whole = lookup(h, text, start, stop, v_blob, v_starts, v_lengths, v_ids, v_slots)
            if whole >= 0:
                out[n_out] = whole
                done = n_out + 1
        if done < 0 and n <= MAX_KERNEL_WORD:
            done = _bpe(text, start, stop, initial, merges, byte_pairs, symbols, ranks, news, out, n_out)
        if done < 0:
            if n_fallback == fallback.shape[0]:
                return n_out, -1, position
            fallback[n_fallback, 0] = start
            fallback[n_fallback, 1] = stop
            fallback[n_fallback, 2] = n_out
            n_fallback += 1
            continue
        if front_row >= 0 and front_keep(front, front_row, k0, front_key(k1, n), out, n_out, done - n_out) != KEPT:
            crowding[0] += 1  # no room, or a word pushed out: the caller grows the table
            mark_overflow(flags, front_row)
        if row >= 0 and done - n_out <= MAX_IDS:  # in the second cache too (the table's words push one another out)
            remember(records, row, k0, k1, k2, n, out, n_out, done - n_out)
        n_out = done
    return n_out, n_fallback, position


@dataclass(frozen=True)
class ByteLevelTables:
    """What the kernel needs of a byte-level BPE tokenizer.

    Attributes:
        classes: uint8, shape (N_CODE_POINTS,): OTHER, LETTER, NUMBER or SPACE of each code point,
            as the tokenizer's regex engine classes it.
        swar_letters: whether the ASCII code points of class LETTER are exactly [A-Za-z] (then
            letter runs are scanned eight bytes at a time).
        ascii_masks: whether the ASCII classes are those `class_masks64` sees (letters [A-Za-z],
            numbers [0-9], whitespace [\\t\\n\\v\\f\\r ]): then either pattern is scanned 64 bytes at a time.
        fold: int64, shape (m,): the ASCII letter a code point below m matches in a case-insensitive
            contraction (`'S`, `'ſ`), else 0.
        pattern: GPT2, LLAMA3 (their written-out scanners) or PROGRAM (`program`).
        ignore_merges: whether a word that is a vocabulary entry is that entry.
        initial: int32, shape (4, 256): the id of a byte as first, middle, last or only symbol; -1
            when the vocabulary lacks it.
        merges: uint64, shape (power of two, 2): per slot (a << 32 | b) + 1 (0 when empty) and
            rank | new id << 32.
        byte_pairs: uint64, shape (65536,) or (0,): rank | new id << 32 of merging the initial ids
            of bytes a and b at a * 256 + b (rank NO_MERGE when none), so a word's first lookups
            read one small table; empty when the initial ids depend on the symbol's place (affixes).
        vocab_*: the vocabulary keyed by raw bytes (`hash_table.ByteTable` arrays); max_key its longest key.
        seeds: uint64, shape (n, 3): the words of up to FRONT_BYTES bytes that BPE makes one token
            (`word_table.seed_words`), in id order.
        front: the word table seeded with them (`word_table.seeded_table`); each cache copies it.
        program: (code, cp_class, table) of a compiled Split chain (`regex_program`: the program
            packed in one array, its class table, its automata), NO_PROGRAM for GPT2 and LLAMA3.
    """

    classes: np.ndarray
    swar_letters: bool
    ascii_masks: bool
    fold: np.ndarray
    pattern: int
    ignore_merges: bool
    initial: np.ndarray
    merges: np.ndarray
    byte_pairs: np.ndarray
    vocab_blob: np.ndarray
    vocab_starts: np.ndarray
    vocab_lengths: np.ndarray
    vocab_ids: np.ndarray
    vocab_slots: np.ndarray
    max_key: int
    seeds: np.ndarray
    front: np.ndarray
    program: tuple = NO_PROGRAM


def merge_table(pairs: dict[tuple[int, int], tuple[int, int]]) -> np.ndarray:
    """The merges {(a, b): (rank, new id)} as an open-addressing table: uint64, shape (slots, 2)."""
    if not pairs:
        return merge_table_of(*(np.zeros(0, dtype=np.int64),) * 4)
    a, b = np.array(list(pairs), dtype=np.int64).T
    ranks, news = np.array(list(pairs.values()), dtype=np.int64).T
    return merge_table_of(a, b, ranks, news)


def merge_table_of(a: np.ndarray, b: np.ndarray, ranks: np.ndarray, news: np.ndarray) -> np.ndarray:
    """The merges (a[i], b[i]) -> (ranks[i], news[i]) as `merge_table` lays them out (int64 arrays, in
    merge order): a pair listed twice keeps its last rank and result, as `tokenizers`' BPE does."""
    size = 1 << max(4, (2 * max(a.shape[0], 1) - 1).bit_length())
    table = np.zeros((size, 2), dtype=np.uint64)
    keys = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    values = ranks.astype(np.uint64) | (news.astype(np.uint64) << np.uint64(32))
    _fill_merges(keys, values, table)
    return table


@kernel()
def _fill_merges(pair_keys, pair_values, table):
    mask = table.shape[0] - 1
    for i in range(pair_keys.shape[0]):
        key = pair_keys[i] + np.uint64(1)
        slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask
        while table[slot, 0] != 0 and table[slot, 0] != key:
            slot = (slot + 1) & mask
        table[slot, 0] = key
        table[slot, 1] = pair_values[i]


def byte_pair_table(merges: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """`ByteLevelTables.byte_pairs` of a merge table and the initial ids (int32, shape (4, 256))."""
    if not (initial == initial[1]).all():
        return np.zeros(0, dtype=np.uint64)
    return _fill_byte_pairs(merges, np.ascontiguousarray(initial[1]))


@kernel()
def _fill_byte_pairs(merges, ids):
    table = np.empty(65536, dtype=np.uint64)
    for a in range(256):
        for b in range(256):
            rank = np.int32(-1)
            new_id = np.int32(0)
            if ids[a] >= 0 and ids[b] >= 0:
                rank, new_id = _merge_lookup(ids[a], ids[b], merges)
            if rank < 0:
                table[a * 256 + b] = np.uint64(NO_MERGE)
            else:
                table[a * 256 + b] = np.uint64(rank) | (np.uint64(new_id) << np.uint64(32))
    return table


def _work_buffers() -> tuple[np.ndarray, ...]:
    """The kernel's scratch arrays (it allocates none): a word's symbols, pair ranks and merged ids
    (`_bpe`), then the words found ahead: their ends, kinds (_FRONT, _CACHED or _LONG), table slots
    (a word's set in the word table, or in the second cache for one of 16 to WORD_BYTES bytes) and keys."""
    return (np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32), np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32),
            np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32), np.empty(AHEAD, dtype=np.int64),
            np.empty(AHEAD, dtype=np.int64), np.empty(AHEAD, dtype=np.int64), np.empty((AHEAD, 3), dtype=np.uint64))


class ByteLevelCache:
    """The kernel's memory of tokenized words, updated in place (it never changes an id).

    Attributes:
        front: the word table (`word_table`): a copy of the tokenizer's, seeded with its one-token
            words, taking the words of up to FRONT_BYTES bytes and FRONT_IDS ids it has room for;
            grown (`grow_if_crowded`) when the words the texts bring find no room in it.
        flags: the table's overflow bitmap (`word_table.overflowed`): a word of a set not marked is in
            the table or new, so its miss skips the second cache.
        records: the second cache (`word_cache`): every word of up to WORD_BYTES bytes computed.
        crowding: int64, shape (1,): words the table had no room for, or that pushed one out, since
            it last grew.
        grows: whether the table grows (up to MAX_SETS sets).
    """

    def __init__(self, tables: ByteLevelTables, sets: int = SETS, front_sets: int | None = None,
                 grows: bool | None = None) -> None:
        """A cache for the tokenizer of `tables`: its seeded word table (seeded again in `front_sets`
        sets when given, a power of two >= 2; then it grows only if `grows`) and an empty second
        cache of `sets` sets."""
        if front_sets is None:
            self.front = empty_table(tables.front.shape[0])  # 64-byte aligned: a set is one cache line
            self.front[:] = tables.front
        else:
            self.front = seeded_table(tables.seeds, front_sets)
        self.flags = overflow_flags(self.front.shape[0])
        self.seeds = tables.seeds
        self.records = PackedWordCache.empty(sets).records
        self.crowding = np.zeros(1, dtype=np.int64)
        self.grows = front_sets is None if grows is None else grows

    def grow_if_crowded(self) -> bool:
        """Doubles the word table (up to MAX_SETS sets) when more words than a sixteenth of its entries
        found no room (or pushed one out) since it last grew: sized to what the texts bring (the
        books' 150,000 distinct words take a 50k-token vocabulary's table from 4 to 16 MB; at 4 MB a
        word a text brings back met another in its set about as often as every twentieth time)."""
        if not self.grows or self.crowding[0] * 16 <= 2 * self.front.shape[0] or self.front.shape[0] >= MAX_SETS:
            return False
        self.front, self.flags = grown_table(self.front, self.seeds, self.records)
        self.crowding[0] = 0
        return True


def encode_bytes(text: np.ndarray, tables: ByteLevelTables, cache: ByteLevelCache,
                 window: int = WINDOW_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """Byte-level BPE of valid UTF-8 bytes; the words the tables cannot vouch for are left to the caller.

    Args:
        text: uint8, shape (n,): valid UTF-8 (the caller checks: the kernel trusts every lead byte);
            read only, never past its end (it may be a view of memory that is not ours to write).
        tables: the tokenizer's tables.
        cache: tokenized words remembered between calls (updated in place; never changes the ids).
        window: bytes of words tokenized a kernel call (its buffers are about 4 bytes a byte: a long
            text is done in windows, each going on where the last one's last word ended).

    Returns:
        (ids: int32 (m,), fallback: int64 (k, 3)): each fallback word's byte start and stop in
        `text` and the position in `ids` where its ids belong.
    """
    if text.dtype != np.uint8 or text.ndim != 1:
        raise TypeError(f"text must be 1-D uint8, got {text.dtype} with shape {text.shape}")
    if window < 1:
        raise ValueError(f"window must be >= 1 byte, got {window}")
    if not text.flags.c_contiguous:
        text = np.ascontiguousarray(text)
    size = text.shape[0]
    span = min(size, window)
    out = np.empty(span + MAX_KERNEL_WORD + 4, dtype=np.int32)  # BPE never makes more tokens than bytes (+ the
    # word table's hit writes 4 slots whatever the count)
    fallback = np.empty((span // 64 + 16, 3), dtype=np.int64)
    state = new_state(tables.program)  # a compiled chain's progress, carried from window to window
    args = (text, tables.classes, tables.swar_letters, tables.ascii_masks, tables.fold, tables.pattern,
            tables.ignore_merges, tables.initial, tables.merges, tables.byte_pairs, tables.vocab_blob,
            tables.vocab_starts, tables.vocab_lengths, tables.vocab_ids, tables.vocab_slots, tables.max_key,
            cache.front, cache.flags, cache.crowding, tables.program + (state,), cache.records, out,
            _work_buffers())
    id_parts, fallback_parts = [], []
    begin, n_ids = 0, 0
    while begin < size or not id_parts:
        limit = min(size, begin + window)
        progress = state.copy()  # a window done again starts from the same progress
        n_out, n_fallback, end = _encode_kernel(*args, fallback, begin, limit)
        if n_fallback < 0:  # more fallback words than room: again with room for one per byte
            fallback = np.empty((span + 1, 3), dtype=np.int64)
            state[:] = progress
            n_out, n_fallback, end = _encode_kernel(*args, fallback, begin, limit)
        if cache.grow_if_crowded():
            args = args[:16] + (cache.front, cache.flags) + args[18:]
        if end >= size and not id_parts:  # one window: no copy
            return out[:n_out], fallback[:n_fallback]
        id_parts.append(out[:n_out].copy())
        found = fallback[:n_fallback].copy()
        found[:, 2] += n_ids
        fallback_parts.append(found)
        n_ids += n_out
        begin = end
    return np.concatenate(id_parts), np.concatenate(fallback_parts)
