"""Byte-level BPE (GPT-2, RoBERTa, ModernBERT, Llama-3/OLMo style) in one jitted pass over UTF-8 bytes.

The kernel reproduces a `ByteLevel` pre-tokenizer (or a `Split` regex followed by a regex-less
`ByteLevel`) and a `BPE` model, from tables built by `pipeline.tokenizer.bytelevel.fast`:

- a per-code-point class table (letter `\\p{L}`, number `\\p{N}`, whitespace `\\s`, other), asked of
  the regex engine the tokenizer itself uses, so the pre-tokenizer's regex needs no regex engine
  here: each supported pattern is written out below as the leftmost-first backtracking match its
  alternatives make (GPT2_PATTERN, LLAMA3_PATTERN);
- the vocabulary keyed by raw bytes (the byte-to-unicode alphabet undone), the merges keyed by
  pair of ids with their rank and result, and each byte's initial id as the first, a middle, the
  last or the only symbol of a word (the `continuing_subword_prefix` and `end_of_word_suffix`
  are in those ids).

A word (pre-token) is tokenized as `BPE.merge_word` does: `ignore_merges` first looks the whole
word up, else its bytes become symbols and the adjacent pair of lowest (rank, position) is merged
until none is in the merges. A word of up to 8 bytes that the model makes one token (most words)
is found in a small table of such words built by asking the model (`word_cache.single_table`); other
words of up to WORD_BYTES bytes are kept in the word cache (`pipeline.kernels.tokenizer.bytelevel.word_cache`: the
word's bytes are its key, a hit reads one cache line), so a repeated word costs a packed load and a
compare. A word the tables cannot vouch for (a byte without
an initial id, so `[UNK]`/byte fallback decide, or longer than MAX_KERNEL_WORD) is returned as a
*fallback word* for the real model, its ids spliced in at the recorded position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from pipeline.kernels.common.hash_table import FNV_OFFSET, hash_step, lookup
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8
from pipeline.kernels.common.prefetch import prefetch_row
from pipeline.kernels.tokenizer.bytelevel.word_cache import (
    MAX_IDS,
    WORD_BYTES,
    PackedWordCache,
    cached_ids,
    remember,
    set_shift,
    single_id,
    word_key,
    word_set,
)

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
N_CODE_POINTS = 0x110000
GPT2, LLAMA3 = 0, 1
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PATTERNS = {GPT2_PATTERN: GPT2, LLAMA3_PATTERN: LLAMA3}
MAX_KERNEL_WORD = 256  # longer words go to the real model (its merge loop is O(n log n), ours O(n^2))
NO_MERGE = np.int32(0x7FFFFFFF)
WINDOW_BYTES = 1 << 20  # words tokenized a kernel call (its buffers grow with it)
AHEAD = 32  # words found (and their cache sets prefetched) before the first of them is looked up

@kernel(inline="always")
def _char(text, i, n):
    """(code point, bytes) of the valid UTF-8 sequence at text[i] (the caller checked validity)."""
    b0 = np.int64(text[i])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | (np.int64(text[i + 1]) & 0x3F), 2
    if b0 < 0xF0:
        return ((b0 & 0x0F) << 12) | ((np.int64(text[i + 1]) & 0x3F) << 6) | (np.int64(text[i + 2]) & 0x3F), 3
    return (((b0 & 0x07) << 18) | ((np.int64(text[i + 1]) & 0x3F) << 12) | ((np.int64(text[i + 2]) & 0x3F) << 6)
            | (np.int64(text[i + 3]) & 0x3F)), 4


@kernel(inline="always")
def _run(text, i, n, classes, kind):
    """(end, chars, start of the last char) of the run of class `kind` starting at byte i."""
    chars = 0
    last = i
    while i < n:
        b = text[i]
        if b < 0x80:
            if classes[b] != kind:
                break
            last = i
            i += 1
        else:
            cp, width = _char(text, i, n)
            if classes[cp] != kind:
                break
            last = i
            i += width
        chars += 1
    return i, chars, last


@kernel()
def _contraction(text, i, n, fold, ignore_case):
    """Bytes of the contraction ('s 't 're 've 'm 'll 'd) at byte i, or 0."""
    if text[i] != 39 or i + 1 >= n:
        return 0
    a, wa = _char(text, i + 1, n)
    if ignore_case:
        a = fold[a] if a < fold.shape[0] else 0
    if a == 115 or a == 116 or a == 109 or a == 100:  # s t m d
        return 1 + wa
    if i + 1 + wa >= n:
        return 0
    b, wb = _char(text, i + 1 + wa, n)
    if ignore_case:
        b = fold[b] if b < fold.shape[0] else 0
    if (a == 114 and b == 101) or (a == 118 and b == 101) or (a == 108 and b == 108):  # re ve ll
        return 1 + wa + wb
    return 0


_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_CASE = np.uint64(0x2020202020202020)


@kernel(inline="always")
def _ascii_letters(x):
    """0x80 in each byte of x (8 text bytes, little-endian) that is an ASCII letter [A-Za-z], else 0:
    the byte with its case bit set lies strictly between 0x60 and 0x7B (the 'has between' bit trick:
    each byte's high bit is cleared first, so no carry crosses a byte)."""
    folded = x | _CASE
    low = folded & _LOW7
    return ((_ONES * np.uint64(127 + 0x7B)) - low) & ~folded & (low + _ONES * np.uint64(127 - 0x60)) & _HIGH


@kernel(inline="always")
def _letter_run_end(text, i, n, classes):
    """End of the run of letters (class LETTER) starting at byte i: eight bytes at a time while
    they are ASCII letters (`swar_letters` of the tables: the class table's ASCII letters are
    exactly [A-Za-z]), then one character at a time from the first byte that is not."""
    while i + 8 <= n:
        others = ~_ascii_letters(load8(text, i)) & _HIGH
        if others == 0:
            i += 8
            continue
        i += np.int64(trailing_zeros(others)) >> 3
        if text[i] < 0x80:  # an ASCII byte that is not a letter: the run ends here
            return i
        break
    return _run(text, i, n, classes, LETTER)[0]


@kernel(inline="always")
def _letters_end(text, i, n, classes, swar_letters):
    """End of the run of letters starting at byte i (eight ASCII bytes at a time with `swar_letters`)."""
    if swar_letters:
        return _letter_run_end(text, i, n, classes)
    return _run(text, i, n, classes, LETTER)[0]


@kernel(inline="always")
def _letter_word_end(text, i, n, classes, swar_letters):
    """End of the match at byte i when it is an ASCII letter, or a space then one: the letter run
    (` ?\\p{L}+` of GPT-2, `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+` of Llama-3; no contraction starts
    there), else -1. Most words take this path and skip the general dispatch."""
    b = text[i]
    if b == 32 and i + 1 < n:
        b = text[i + 1]
        i += 1
    if b < 0x80 and classes[b] == LETTER:
        return _letters_end(text, i + 1, n, classes, swar_letters)
    return -1


@kernel()
def _other_word_end(text, i, n, classes, fold, pattern, swar_letters):
    """End (byte) of the regex match at byte i (GPT2_PATTERN or LLAMA3_PATTERN: their leftmost-first
    alternatives written out), for any word; the first character and the next are classified once.

    GPT-2: a contraction; ` ?` then a run of one class (letters, numbers or others); else whitespace,
    `\\s+(?!\\S)` leaving the run's last character to the next word, `\\s+` when it is alone or ends
    the text. Llama-3: a case-insensitive contraction; one character that is neither a newline, a
    letter nor a number then letters (or letters alone); up to three numbers; ` ?` then others then
    newlines; whitespace to its last newline (`\\s*[\\r\\n]+`); else as GPT-2's whitespace."""
    llama = pattern == LLAMA3
    if text[i] == 39:
        length = _contraction(text, i, n, fold, llama)
        if length:
            return i + length
    cp, width = _char(text, i, n)
    c = classes[cp]
    if c == LETTER:
        return _letters_end(text, i + width, n, classes, swar_letters)
    j = i + width
    nxt = np.int64(-1)
    kind = np.uint8(255)
    next_width = 0
    if j < n:
        nxt, next_width = _char(text, j, n)
        kind = classes[nxt]
    if llama:
        if kind == LETTER and c != NUMBER and cp != 10 and cp != 13:  # `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`
            return _letters_end(text, j + next_width, n, classes, swar_letters)
        if c == NUMBER:  # `\\p{N}{1,3}`
            end = j
            for _ in range(2):
                if end >= n:
                    break
                nxt, w = _char(text, end, n)
                if classes[nxt] != NUMBER:
                    break
                end += w
            return end
        if c == OTHER or (cp == 32 and kind == OTHER):  # ` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`
            end = _run(text, j, n, classes, OTHER)[0]
            while end < n and (text[end] == 10 or text[end] == 13):
                end += 1
            return end
    else:
        if cp == 32 and j < n and kind != SPACE:  # ` ?\\p{L}+`, ` ?\\p{N}+`, ` ?[^\\s\\p{L}\\p{N}]+`
            return _run(text, j, n, classes, kind)[0]
        if c != SPACE:
            return _run(text, j, n, classes, c)[0]
    if kind != SPACE:  # whitespace alone (or a newline alone in Llama-3's `\\s*[\\r\\n]+`)
        return j
    end, chars, last = _run(text, j, n, classes, SPACE)
    if llama:
        last_newline = -1
        for m in range(i, end):
            if text[m] == 10 or text[m] == 13:
                last_newline = m
        if last_newline >= 0:  # `\\s*[\\r\\n]+`
            return last_newline + 1
    if end == n:  # `\\s+(?!\\S)` to the end
        return end
    return last  # `\\s+(?!\\S)` backs off one so the last space joins the next word


@kernel(inline="always")
def _merge_lookup(a, b, keys, values):
    """(rank, new id) of merging ids a and b, or (-1, -1)."""
    key = (np.uint64(a) << np.uint64(32)) | np.uint64(b)
    mask = keys.shape[0] - 1
    slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask
    while keys[slot] != 0:
        if keys[slot] == key + np.uint64(1):
            return values[slot, 0], values[slot, 1]
        slot = (slot + 1) & mask
    return -1, -1


@kernel(inline="always")
def _pair(symbols, q, merge_keys, merge_values, ranks, news):
    """Looks up the pair (symbols[q], symbols[q + 1]) into ranks[q], news[q] (NO_MERGE when none)."""
    rank, new_id = _merge_lookup(symbols[q], symbols[q + 1], merge_keys, merge_values)
    ranks[q] = rank if rank >= 0 else NO_MERGE
    news[q] = new_id


@kernel()
def _bpe(text, start, stop, initial, merge_keys, merge_values, symbols, ranks, news, out, n_out):
    """BPE of the word text[start:stop] into out[n_out:]; returns the new n_out, or -1 when a byte
    has no initial id (the real model decides what [UNK] or byte fallback make of it).

    The pair of lowest (rank, position) is merged until no pair is a merge, as `BPE.merge_word`
    does; each pair's rank is looked up once and only the two pairs around a merge again."""
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
    for q in range(n - 1):
        _pair(symbols, q, merge_keys, merge_values, ranks, news)
    count = n
    while count > 1:
        best = 0
        for q in range(1, count - 1):
            if ranks[q] < ranks[best]:
                best = q
        if ranks[best] == NO_MERGE:
            break
        symbols[best] = news[best]
        for q in range(best + 1, count - 1):
            symbols[q] = symbols[q + 1]
        for q in range(best + 1, count - 2):
            ranks[q] = ranks[q + 1]
            news[q] = news[q + 1]
        count -= 1
        if best > 0:
            _pair(symbols, best - 1, merge_keys, merge_values, ranks, news)
        if best < count - 1:
            _pair(symbols, best, merge_keys, merge_values, ranks, news)
    for q in range(count):
        out[n_out + q] = symbols[q]
    return n_out + count


@kernel(inline="always")
def _word_end(text, position, size, classes, fold, pattern, swar_letters):
    """End (byte) of the pre-token starting at byte `position`."""
    stop = _letter_word_end(text, position, size, classes, swar_letters)
    if stop >= 0:
        return stop
    if position + 1 < size:  # one ASCII punctuation mark before a space, or a newline alone: one character
        b = text[position]
        following = text[position + 1]
        if b < 0x80 and following < 0x80 and b != 39:
            if classes[following] == SPACE:
                if classes[b] == OTHER and (pattern == GPT2 or (following != 10 and following != 13)):
                    return position + 1
            elif b == 10:
                return position + 1
    return _other_word_end(text, position, size, classes, fold, pattern, swar_letters)


@kernel()
def _encode_kernel(text, classes, swar_letters, fold, pattern, ignore_merges, initial, merge_keys,
                   merge_values, v_blob, v_starts, v_lengths, v_ids, v_slots, max_key, singles, records, out,
                   fallback, begin, limit):
    """Pre-tokenize and BPE the words of valid UTF-8 text that start in [begin, limit); returns
    (n_out, n_fallback, where the last word ends). `begin` is 0 or where such a call's last word
    ended: the regexes look only forward, so their matches from there are those of the whole text.
    fallback[k] = (byte start, byte stop, position in out) of a word left to the real model.
    out needs room for limit - begin + MAX_KERNEL_WORD ids (the last word may end past limit).

    A word of up to 8 bytes that is one token is found in `singles` (small, so it stays in the CPU's
    cache); any other word of up to WORD_BYTES bytes is looked up in the word cache (one cache line),
    then, on a miss, in the vocabulary (`ignore_merges`) or merged, and remembered. The words are
    found AHEAD words before they are looked up, and the cache sets of those not in `singles`
    prefetched when found, so that several lookups' memory fetches overlap instead of following
    one another (the pre-tokenizer does not depend on the cache, so the order changes nothing else)."""
    symbols = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    ranks = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    news = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    ahead_stops = np.empty(AHEAD, dtype=np.int64)
    ahead_found = np.empty(AHEAD, dtype=np.int64)  # the word's id (a one-token word), its cache set, or -1
    ahead_keys = np.empty((AHEAD, 3), dtype=np.uint64)
    n_out = 0
    n_fallback = 0
    size = text.shape[0]
    shift = set_shift(records)
    single_shift = set_shift(singles) - np.uint64(1)
    found_end = begin  # where the words found so far end
    n_found = 0  # words found
    n_done = 0  # words tokenized
    position = begin  # where the next word to tokenize starts
    while True:
        while n_found - n_done < AHEAD and found_end < limit:
            stop = _word_end(text, found_end, size, classes, fold, pattern, swar_letters)
            n = stop - found_end
            found = np.int64(-1)
            if n <= WORD_BYTES:
                k0, k1, k2 = word_key(text, found_end, n)
                single = np.int64(-1)
                if n <= 8:
                    single = single_id(singles, k0, n, single_shift)
                if single >= 0:
                    found = single
                else:
                    row = word_set(k0, k1, k2, n, shift)
                    prefetch_row(records, row)
                    prefetch_row(records, row + 1)
                    found = -2 - row
                    slot = n_found & (AHEAD - 1)
                    ahead_keys[slot, 0] = k0
                    ahead_keys[slot, 1] = k1
                    ahead_keys[slot, 2] = k2
            slot = n_found & (AHEAD - 1)
            ahead_stops[slot] = stop
            ahead_found[slot] = found
            found_end = stop
            n_found += 1
        if n_done == n_found:
            break
        slot = n_done & (AHEAD - 1)
        n_done += 1
        start = position
        stop = ahead_stops[slot]
        found = ahead_found[slot]
        position = stop
        if found >= 0:
            out[n_out] = found
            n_out += 1
            continue
        n = stop - start
        row = -2 - found
        k0 = k1 = k2 = np.uint64(0)
        if row >= 0:
            k0 = ahead_keys[slot, 0]
            k1 = ahead_keys[slot, 1]
            k2 = ahead_keys[slot, 2]
            done = cached_ids(records, row, k0, k1, k2, n, out, n_out)
            if done >= 0:
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
            done = _bpe(text, start, stop, initial, merge_keys, merge_values, symbols, ranks, news, out, n_out)
        if done < 0:
            if n_fallback == fallback.shape[0]:
                return n_out, -1, position
            fallback[n_fallback, 0] = start
            fallback[n_fallback, 1] = stop
            fallback[n_fallback, 2] = n_out
            n_fallback += 1
            continue
        if row >= 0 and done - n_out <= MAX_IDS:
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
        fold: int64, shape (m,): the ASCII letter a code point below m matches in a case-insensitive
            contraction (`'S`, `'ſ`), else 0.
        pattern: GPT2 or LLAMA3.
        ignore_merges: whether a word that is a vocabulary entry is that entry.
        initial: int32, shape (4, 256): the id of a byte as first, middle, last or only symbol; -1
            when the vocabulary lacks it.
        merge_keys: uint64 (power of two,): (a << 32 | b) + 1 per slot, 0 when empty.
        merge_values: int32, shape (slots, 2): rank and new id.
        vocab_*: the vocabulary keyed by raw bytes (`hash_table.ByteTable` arrays); max_key its longest key.
        singles: the words of up to 8 bytes that the model makes one token (`word_cache.single_table`).
    """

    classes: np.ndarray
    swar_letters: bool
    fold: np.ndarray
    pattern: int
    ignore_merges: bool
    initial: np.ndarray
    merge_keys: np.ndarray
    merge_values: np.ndarray
    vocab_blob: np.ndarray
    vocab_starts: np.ndarray
    vocab_lengths: np.ndarray
    vocab_ids: np.ndarray
    vocab_slots: np.ndarray
    max_key: int
    singles: np.ndarray


def merge_table(pairs: dict[tuple[int, int], tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The merges as an open-addressing table: (keys uint64, values int32 (slots, 2))."""
    size = 1 << max(4, (2 * max(len(pairs), 1) - 1).bit_length())
    keys = np.zeros(size, dtype=np.uint64)
    values = np.zeros((size, 2), dtype=np.int32)
    pair_keys = np.array([(a << 32) | b for a, b in pairs], dtype=np.uint64)
    pair_values = np.array(list(pairs.values()), dtype=np.int32).reshape(-1, 2)
    _fill_merges(pair_keys, pair_values, keys, values)
    return keys, values


@kernel()
def _fill_merges(pair_keys, pair_values, keys, values):
    mask = keys.shape[0] - 1
    for i in range(pair_keys.shape[0]):
        key = pair_keys[i]
        slot = np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) & mask
        while keys[slot] != 0:
            slot = (slot + 1) & mask
        keys[slot] = key + np.uint64(1)
        values[slot, 0] = pair_values[i, 0]
        values[slot, 1] = pair_values[i, 1]


ByteLevelCache = PackedWordCache  # the kernel's cache of tokenized words (the name other modules import)


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
    out = np.empty(span + MAX_KERNEL_WORD + 1, dtype=np.int32)  # BPE never makes more tokens than bytes
    fallback = np.empty((span // 64 + 16, 3), dtype=np.int64)
    args = (text, tables.classes, tables.swar_letters, tables.fold, tables.pattern, tables.ignore_merges,
            tables.initial, tables.merge_keys, tables.merge_values, tables.vocab_blob, tables.vocab_starts,
            tables.vocab_lengths, tables.vocab_ids, tables.vocab_slots, tables.max_key, tables.singles,
            cache.records, out)
    id_parts, fallback_parts = [], []
    begin, n_ids = 0, 0
    while begin < size or not id_parts:
        limit = min(size, begin + window)
        n_out, n_fallback, end = _encode_kernel(*args, fallback, begin, limit)
        if n_fallback < 0:  # more fallback words than room: again with room for one per byte
            fallback = np.empty((span + 1, 3), dtype=np.int64)
            n_out, n_fallback, end = _encode_kernel(*args, fallback, begin, limit)
        if end >= size and not id_parts:  # one window: no copy
            return out[:n_out], fallback[:n_fallback]
        id_parts.append(out[:n_out].copy())
        found = fallback[:n_fallback].copy()
        found[:, 2] += n_ids
        fallback_parts.append(found)
        n_ids += n_out
        begin = end
    return np.concatenate(id_parts), np.concatenate(fallback_parts)
