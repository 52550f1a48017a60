"""Llama-style BPE (byte fallback, no pre-tokenizer) as one stream: the whole normalised text is a
single BPE word, cut into *segments* only where no merge can cross.

For a tokenizer whose normalizer maps every character alone (`Prepend("▁")` then `Replace(" ",
"▁")`, or the Replace alone, as Llama-2, Mistral and Gemma ship) and whose BPE has byte fallback
with all 256 byte pieces, none of which any merge takes, the real tokenizer encodes `prefix +
f(c1) + f(c2) + ...` as one word (`f`: a character's output, `prefix`: what Prepend adds to a
non-empty text). Its merges never cross a boundary between two output characters u | v where u or
v becomes byte pieces, or both are pieces and no piece holds u directly followed by v (a merge
joining across would make such a piece). So the text is cut at raw-character boundaries where
that holds for the characters' outputs (`pipeline.tokenizer.sentencepiece.stream` marks, per code
point, whether a cut before it, after it, or between it and a following ASCII space is always
safe), and each segment is encoded as a part of the word, its ids independent of the rest.

A segment is remembered in the chunk cache (`pipeline.kernels.tokenizer.sentencepiece.encode`) under its raw
bytes with the STREAM flag (the first segment of a text, which carries the prefix, without: its ids
are those of the segment as a text of its own, the chunk cache's meaning); a segment of one
character that is a piece, or that becomes byte pieces, is written directly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pipeline.kernels.common.hash_table import FNV_OFFSET, hash_step
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.prefetch import prefetch_row
from pipeline.kernels.common.utf8 import BMP, decode
from pipeline.kernels.tokenizer.sentencepiece.bpe import bpe_ids, merge_part
from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import (
    CHUNK_BYTES,
    NO_FLAGS,
    STREAM_FLAG,
    cached_count,
    copy_ids,
    insert,
    probe,
    row_key,
    set_of,
)

CUT_BEFORE = 1  # a cut just before this character is safe whatever precedes it
CUT_AFTER = 2  # a cut just after it is safe whatever follows
CUT_BEFORE_SPACE = 4  # a cut between it and a following ASCII space is safe
DIRECT_BYTES = -2  # direct_id: the character alone becomes the byte pieces of its output
_BATCH = 32
_WHOLE = 32  # output bytes up to which a segment is merged whole, not cut into parts first


class StreamTables(NamedTuple):
    """The stream form of a tokenizer (`pipeline.tokenizer.sentencepiece.stream.stream_form`), per BMP
    code point: its cut class (CUT_* bits), its direct id (a piece, DIRECT_BYTES or -1), where its
    output lies in `f_blob` (f_start, f_len, int32); prefix: uint8, what the first segment of a text
    starts with; growth: int64 [the most output bytes one input byte makes]."""

    classes: np.ndarray
    direct: np.ndarray
    f_start: np.ndarray
    f_len: np.ndarray
    f_blob: np.ndarray
    prefix: np.ndarray
    growth: np.ndarray


@kernel()
def stream_encode(text, begin, stream, bpe, cache, out, n_out):
    """Encode text[begin:] segment by segment; returns (n_out, stop, bad): stop < len(text) when `out`
    had no room for the next segment (call again from stop with a larger `out`); bad = 1 when the
    text holds invalid UTF-8 (then nothing is reliable: encode it another way).

    stream: `StreamTables`; bpe: the model tables (`bpe.BpeArrays`); cache: `chunk_cache.chunk_cache`."""
    classes, direct, f_start, f_len, f_blob, prefix, growth = stream
    b_blob, b_starts, b_lengths, b_ids, b_slots = bpe.blob, bpe.starts, bpe.lengths, bpe.ids, bpe.slots
    p_table, b_bytes, b_chars, b_merges = bpe.pair_table, bpe.byte_ids, bpe.char_ids, bpe.merge_table
    b_fallback, b_fuse, b_ignore, b_unk_mode, b_unk = bpe.flags[0], bpe.flags[1] != 0, bpe.flags[2] != 0, \
        bpe.flags[3], bpe.flags[4]
    cache_bytes = cache.view(np.uint8)
    cache_ints = cache.view(np.int32)
    n = text.shape[0]
    size = 256
    words = np.empty(size, np.uint8)
    symbols = np.empty(3 * size, np.int32)
    parts = np.empty((size, 2), np.int64)
    seg_start = np.empty(_BATCH, np.int64)
    seg_stop = np.empty(_BATCH, np.int64)
    seg_hash = np.empty(_BATCH, np.uint64)
    seg_cp = np.empty(_BATCH, np.int64)  # the code point of a one-character segment, else -1
    position = begin
    while position < n:
        count = 0
        while count < _BATCH and position < n:  # find segments ahead and prefetch their rows (overlapping fetches)
            h = FNV_OFFSET
            j = position
            previous = 0
            chars = 0
            last = np.int64(-1)
            while j < n:
                c = text[j]
                if c < 0x80:
                    cp, width = np.int64(c), 1
                else:
                    cp, width = decode(text, j, n)
                    if cp < 0:
                        return n_out, j, 1
                cls = classes[cp] if cp < BMP else 0
                if j > position and ((previous & CUT_AFTER) != 0 or (cls & CUT_BEFORE) != 0
                                     or (c == 32 and (previous & CUT_BEFORE_SPACE) != 0)):
                    break
                for k in range(j, j + width):
                    h = hash_step(h, text[k])
                previous = cls
                last = cp
                chars += 1
                j += width
            seg_start[count] = position
            seg_stop[count] = j
            seg_hash[count] = h
            seg_cp[count] = last if chars == 1 and position > 0 and last < BMP else -1
            count += 1
            if j - position <= CHUNK_BYTES:
                slot = set_of(h, cache)
                prefetch_row(cache, slot)
                prefetch_row(cache, slot + 1)
            position = j
        for q in range(count):
            i, j, h = seg_start[q], seg_stop[q], seg_hash[q]
            if seg_cp[q] >= 0 and direct[seg_cp[q]] != -1:  # one character: its piece, or its byte pieces
                cp = seg_cp[q]
                if n_out + f_len[cp] > out.shape[0]:
                    return n_out, i, 0
                if direct[cp] >= 0:
                    out[n_out] = direct[cp]
                    n_out += 1
                else:
                    for t in range(f_start[cp], f_start[cp] + f_len[cp]):
                        out[n_out] = b_bytes[f_blob[t]]
                        n_out += 1
                continue
            length = j - i
            cacheable = length <= CHUNK_BYTES
            slot = set_of(h, cache)
            key = row_key(h, length, STREAM_FLAG if i > 0 else NO_FLAGS)
            if cacheable:
                row = probe(cache, cache_bytes, slot, key, text, i, length)
                if row >= 0:
                    if n_out + cached_count(cache_ints, row) > out.shape[0]:
                        return n_out, i, 0
                    n_out = copy_ids(cache_ints, row, out, n_out)
                    continue
            need = prefix.shape[0] + growth[0] * length + 8
            if need > size:
                size = max(need, 2 * size)
                words = np.empty(size, np.uint8)
                symbols = np.empty(3 * size, np.int32)
                parts = np.empty((size, 2), np.int64)
            m = np.int64(0)  # never a literal: a literal argument would compile bpe_ids once more
            if i == 0:
                for k in range(prefix.shape[0]):
                    words[m] = prefix[k]
                    m += 1
            k = i
            while k < j:
                c = text[k]
                if c < 0x80:
                    cp, width = np.int64(c), 1
                else:
                    cp, width = decode(text, k, j)
                if cp < BMP:
                    for t in range(f_start[cp], f_start[cp] + f_len[cp]):
                        words[m] = f_blob[t]
                        m += 1
                else:  # beyond the BMP a character is itself (`stream_form` checks no Replace touches one)
                    for t in range(k, k + width):
                        words[m] = text[t]
                        m += 1
                k += width
            if n_out + m > out.shape[0]:  # every id takes at least one output byte
                return n_out, i, 0
            first = n_out
            if m <= _WHOLE:  # a short segment: merged whole (what bpe_ids' parts would give, without the cutting)
                n_out = merge_part(words, np.int64(0), m, b_blob, b_starts, b_lengths, b_ids, b_slots, b_chars,
                                   b_merges, b_bytes, b_fallback, b_fuse, b_unk_mode, b_unk, symbols, out, n_out)
            else:
                n_out = bpe_ids(words, np.int64(0), m, b_blob, b_starts, b_lengths, b_ids, b_slots, b_chars,
                                b_merges, p_table, b_bytes, b_fallback, b_fuse, b_ignore, b_unk_mode, b_unk,
                                symbols, parts, out, n_out)
            if n_out < 0:
                return first, i, 1
            if cacheable:
                insert(cache, cache_bytes, cache_ints, slot, key, text, i, length, out, first, n_out)
    return n_out, n, 0
