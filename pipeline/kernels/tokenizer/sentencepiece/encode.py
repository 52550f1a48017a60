"""The SentencePiece encoder's main loop: cut the text into chunks at safe cuts, answer repeated
chunks from a cache, and run the normalizer, pre-tokenizer and model (`normalizer`, `unigram`, `bpe` of
`pipeline.kernels.tokenizer.sentencepiece`) on the rest.

What makes it fast (and why it stays exact):

- *chunk cache* (`chunk_cache`): a chunk of at most CHUNK_BYTES bytes is remembered with its ids
  in one 64-byte row: a repeated chunk costs one hash, one memory line and a byte compare. A hit
  is checked byte for byte, so the cache changes the speed, never the ids.
- *word cache*: a chunk the cache does not know and that is not plain (below) is normalised and
  pre-tokenized, and each of its words (the model's inputs, normalised bytes) is looked up in the
  same table under a word key before the model runs: the model is a function of the word alone,
  so `mark,” sneered\nLef.` costs one pre-tokenization and four lookups once its words are known.
- *plain chunks*: a chunk whose every character is plain (`plain_map` for ASCII bytes,
  `plain_cp` for the rest: see `pipeline.tokenizer.sentencepiece.plain`) is one word: a fixed
  prefix (`plain_prefix`) followed by each character's output from the table, without the tail
  operation passes. Any other chunk takes the general path (`normalizer.pre_tokenize`).
- the Unigram model walks a double-array trie (`pipeline.kernels.tokenizer.sentencepiece.trie`).

A chunk holding a character the table does not vouch for is not encoded here: maximal runs of
such chunks are returned as fallback spans for the real tokenizer, their ids spliced in at the
recorded position.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from pipeline.kernels.common.jit import helper, kernel
from pipeline.kernels.common.loads import load8
from pipeline.kernels.common.prefetch import prefetch_row
from pipeline.kernels.common.utf8 import decode_bmp, decode_valid, utf8_width
from pipeline.kernels.tokenizer.sentencepiece.bpe import bpe_ids, bpe_parts, merge_part
from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import (
    CHUNK_BYTES,
    NO_FLAGS,
    WORD_FLAG,
    cached_count,
    copy_ids,
    insert_packed,
    packed,
    packed_hash,
    probe_packed,
    row_key,
    set_of,
)
from pipeline.kernels.tokenizer.sentencepiece.normalizer import (
    CUT_DROP,
    CUT_NONE,
    OP_COLLAPSE_SPACES,
    OP_MAP,
    OP_PREPEND,
    OP_REPLACE,
    OP_REPLACE_START,
    pre_tokenize,
)
from pipeline.kernels.tokenizer.sentencepiece.unigram import viterbi_ids

_BATCH = 32  # chunks found ahead of the one being encoded
_LOW_21 = np.uint64(0x2121212121212121)
_HIGH_BITS = np.uint64(0x8080808080808080)


class Cuts(NamedTuple):
    """Where `encode_kernel` cuts a text into chunks (see
    `pipeline.tokenizer.sentencepiece.plain.whitespace_cuts`)."""

    rule: np.ndarray  # int64 [cut mode (CUT_*), 1 to cut at whitespace runs instead of single ASCII spaces]
    left: np.ndarray  # uint8 (256,): ASCII bytes a cut at a space may follow
    right: np.ndarray  # uint8 (256,): ASCII bytes a cut at a space may precede
    run_bytes: np.ndarray  # uint8 (256,): the bytes of a whitespace run
    edges: np.ndarray  # uint8 (BMP,): bit 1, the character may end a text before a run; bit 2, start one after
    isolate: np.ndarray  # uint8 (256,): ASCII bytes that are chunks of their own between ASCII neighbours (all 0: none)


class Normalizer(NamedTuple):
    """The normalizer and pre-tokenizer of a tokenizer for `encode_kernel` (see `normalizer.pre_tokenize`
    and, for the plain path, `pipeline.tokenizer.sentencepiece.plain.plain_form`)."""

    flags: np.ndarray  # uint8 (BMP,): 1 where the per-code-point table vouches for the character
    cp_start: np.ndarray  # int32 (BMP,): where its output lies in cp_blob
    cp_len: np.ndarray  # int32 (BMP,)
    cp_blob: np.ndarray  # uint8
    marks: np.ndarray  # uint8 (MARK_COUNT * BASE_COUNT,) or empty: the mark-after-letter pairs `normalizer._map` takes
    ops: np.ndarray  # int64 (k, 5): the tail operations (OP_*)
    op_blob: np.ndarray  # uint8: their patterns and contents
    pretok: np.ndarray  # int64 [whitespace split, metaspace, prepend, split, is BPE]
    growth: np.ndarray  # int64 [the longest output of one code point]
    plain_map: np.ndarray  # uint8 (256,)
    plain_prefix: np.ndarray  # int64 [length or -1, bytes...]
    plain_cp: np.ndarray  # uint8 (BMP,)


class Work(NamedTuple):
    """`encode_kernel`'s scratch arrays (it allocates none: `work_buffers`): a chunk's normalised text
    (two buffers the tail operations alternate between), its words and their bounds, the model's
    scratch (BPE symbols, the Viterbi's best scores and starts, BPE parts), the batch of chunks found
    ahead (starts, stops, hashes)."""

    src: np.ndarray  # uint8 (size,)
    dst: np.ndarray  # uint8 (size,)
    words: np.ndarray  # uint8 (size + 8,)
    bounds: np.ndarray  # int64 (size + 8, 2)
    symbols: np.ndarray  # int32 (3 * size + 24,)
    best_score: np.ndarray  # float64 (size + 8,)
    best_start: np.ndarray  # int64 (size + 8,)
    parts: np.ndarray  # int64 (size + 8, 2)
    chunk_start: np.ndarray  # int64 (_BATCH,)
    chunk_stop: np.ndarray  # int64 (_BATCH,)
    chunk_hash: np.ndarray  # uint64 (_BATCH,)


WORK_BYTES = 256  # the chunk size `work_buffers` makes room for unless asked for more


def work_buffers(size: int = WORK_BYTES) -> Work:
    """Scratch for `encode_kernel`, for chunks whose normalised text and words fit in `size` bytes
    (the kernel returns the size it needs when a chunk does not fit: call again with larger ones)."""
    return Work(np.empty(size, np.uint8), np.empty(size, np.uint8), np.empty(size + 8, np.uint8),
                np.empty((size + 8, 2), np.int64), np.empty(3 * size + 24, np.int32),
                np.empty(size + 8, np.float64), np.empty(size + 8, np.int64), np.empty((size + 8, 2), np.int64),
                np.empty(_BATCH, np.int64), np.empty(_BATCH, np.int64), np.empty(_BATCH, np.uint64))


@helper
def _bounds(text, i, j, ops, flags, cp_len, max_cp):
    """(largest intermediate text, words) in bytes that normalising and pre-tokenizing text[i:j] can
    make: the per-character table's output summed where it comes first, each tail operation's
    growth after it, and Metaspace's (every byte a `▁`, one prepended)."""
    size = j - i
    peak = size
    for r in range(ops.shape[0]):
        code, plen, clen = ops[r, 0], ops[r, 2], ops[r, 4]
        if code == OP_MAP and r == 0:
            size = 0
            k = i
            while k < j:
                size_k = utf8_width(text[k])  # what the character would be if valid (a truncated one: its lead byte)
                cp = decode_valid(text, k)[0] if k + size_k <= j else np.int64(text[k])
                size += cp_len[cp] if size_k < 4 and cp < flags.shape[0] and flags[cp] != 0 else 4
                k += size_k
        elif code == OP_MAP:
            size *= max_cp
        elif code == OP_REPLACE:
            size *= max(1, (clen + plen - 1) // max(plen, 1))
        elif code == OP_COLLAPSE_SPACES:
            size *= max(1, (clen + 1) // 2)
        elif code in (OP_PREPEND, OP_REPLACE_START):
            size += clen
        peak = max(peak, size)
    return peak + 8, 3 * size + 8


@helper
def _ends_before_run(text, lo, j, edges):
    """Whether the character that ends at text[j] (not before lo) may end the text before a cut run."""
    k = j - 1
    if text[k] < 0x80:
        return (edges[text[k]] & 1) != 0
    s = k
    while s > lo and (text[s] & 0xC0) == 0x80 and k - s < 3:
        s -= 1
    cp, width = decode_bmp(text, s, j)
    return cp >= 0 and s + width == j and (edges[cp] & 1) != 0


@helper
def _starts_after_run(text, e, n, edges):
    """Whether the character at text[e] may start the text after a cut run."""
    cp, width = decode_bmp(text, e, n)
    return cp >= 0 and (edges[cp] & 2) != 0


@kernel(_nrt=False)  # no reference counting (see the docstring)
def encode_kernel(text, begin, cuts, normalizer, uni, bpe, cache, out, n_out, spans, n_spans, work):
    """Encode text[begin:] chunk by chunk; returns (n_out, n_spans, stop, need): stop < len(text) when
    `out` had no room for the next chunk (call again from stop with a larger `out`) or, with need > 0,
    when the chunk at stop needs `work` buffers of `need` bytes (call again with `work_buffers(need)`).

    cuts: `Cuts`; normalizer: `Normalizer`; uni / bpe: the model tables (`unigram.UnigramArrays`,
    `bpe.BpeArrays`); cache: `chunk_cache.chunk_cache`; spans: int64 (k, 3) fallback spans (byte start,
    byte stop, position in out); work: `Work`.

    Compiled without numba's reference counting (NRT), so it allocates nothing: with it, every array
    handed to a helper (the cache's probe and insert, the normalizer, the Viterbi) was counted in and
    out around each call, about a hundred atomic updates' worth of code in the chunk loop."""
    cut_mode, cut_left, cut_right, run_bytes, edges = cuts.rule[0], cuts.left, cuts.right, cuts.run_bytes, cuts.edges
    isolate = cuts.isolate
    by_runs = cuts.rule[1] != 0  # cut at whitespace runs (`whitespace_cuts`) instead of single ASCII spaces
    flags, cp_start, cp_len, cp_blob, marks, ops, op_blob, pretok, growth, plain_map, plain_prefix, plain_cp = \
        normalizer
    cells, u_scores, u_bytes = uni.cells, uni.scores, uni.byte_ids
    unk_score = uni.unk_score[0]
    u_unk, u_fallback = uni.unk[0], uni.unk[1] != 0
    b_blob, b_starts, b_lengths, b_ids, b_slots = bpe.blob, bpe.starts, bpe.lengths, bpe.ids, bpe.slots
    p_table, b_bytes, b_chars, b_merges = bpe.pair_table, bpe.byte_ids, bpe.char_ids, bpe.merge_table
    b_fallback, b_fuse, b_ignore, b_unk_mode, b_unk = bpe.flags[0], bpe.flags[1] != 0, bpe.flags[2] != 0, \
        bpe.flags[3], bpe.flags[4]
    is_bpe = pretok[4] != 0
    by_parts = is_bpe and not b_ignore  # BPE words are cached by parts (`bpe_parts`)
    plain_ok = plain_prefix[0] >= 0  # plain_prefix: (length or -1, bytes...)
    n_prefix = plain_prefix[0]
    cache_ints = cache.view(np.int32)
    n = text.shape[0]
    src, dst, words, bounds, symbols, best_score, best_start, parts, chunk_start, chunk_stop, chunk_hash = work
    open_span = n_spans > 0 and spans[n_spans - 1, 1] == begin
    cutting = cut_mode != CUT_NONE
    position = begin
    while position < n:
        # find the next _BATCH chunks (up to each safe cut) and prefetch their cache rows, so that the
        # memory fetches of a batch overlap instead of following one another
        count = 0
        while count < _BATCH and position < n:
            j = position
            following = n
            while j < n:
                if by_runs:
                    # to the next byte below 0x21 (every run byte is one) eight bytes at a time: the lowest
                    # flagged byte of `(w - 0x21..) & ~w & 0x80..` is the first such byte of w
                    while j + 8 <= n:
                        w = load8(text, j)
                        below = (w - _LOW_21) & ~w & _HIGH_BITS
                        if below != 0:
                            j += np.int64(trailing_zeros(below)) >> 3
                            break
                        j += 8
                    if j >= n:
                        break
                    c = text[j]
                    if run_bytes[c] != 0 and j > position:
                        e = j + 1
                        while e < n and run_bytes[text[e]] != 0:
                            e += 1
                        # ASCII neighbours (nearly every run) read `edges` here; the rest decode in the helpers
                        before, after = text[j - 1], text[e] if e < n else np.uint8(0)
                        if e < n and ((edges[before] & 1) != 0 if before < 0x80
                                      else _ends_before_run(text, position, j, edges)) \
                                and ((edges[after] & 2) != 0 if after < 0x80 else _starts_after_run(text, e, n, edges)):
                            following = e  # the run belongs to neither side
                            break
                        j = e
                        continue
                    j += 1
                    continue
                c = text[j]
                if c == 32 and cutting and j > position and j + 1 < n and cut_left[text[j - 1]] != 0 \
                        and cut_right[text[j + 1]] != 0:
                    # the next chunk starts after the space (CUT_DROP) or at it (CUT_KEEP)
                    following = j + 1 if cut_mode == CUT_DROP else j
                    break
                elif isolate[c] != 0 and (j + 1 == n or text[j + 1] < 0x80) and (j == 0 or text[j - 1] < 0x80):
                    # a character an isolated Split makes a word of its own: a chunk of its own
                    if j == position:
                        j += 1
                    following = j
                    break
                j += 1
            chunk_start[count] = position
            chunk_stop[count] = j
            h = np.uint64(0)
            if j - position <= CHUNK_BYTES:  # the cache's row: its hash from the chunk's packed bytes
                k0, k1, k2 = packed(text, position, j - position)
                h = packed_hash(k0, k1, k2)
                slot = set_of(h, cache)
                prefetch_row(cache, slot)
                prefetch_row(cache, slot + 1)
            chunk_hash[count] = h
            count += 1
            position = following
        for q in range(count):
            i, j, h = chunk_start[q], chunk_stop[q], chunk_hash[q]
            length = j - i
            cacheable = length <= CHUNK_BYTES
            slot = set_of(h, cache)
            key = row_key(h, length, NO_FLAGS)
            k0 = k1 = k2 = np.uint64(0)
            if cacheable:
                k0, k1, k2 = packed(text, i, length)
                row = probe_packed(cache, slot, key, k0, k1, k2)
                if row >= 0:
                    if n_out + cached_count(cache_ints, row) > out.shape[0]:
                        return n_out, n_spans, i, np.int64(0)
                    n_out = copy_ids(cache_ints, row, out, n_out)
                    open_span = False
                    continue
            plain = plain_ok and length > 0  # plain characters only: one word, prefix and their outputs
            size = 0
            k = i
            while plain and k < j:
                byte = text[k]
                if byte < 0x80:
                    plain = plain_map[byte] != 0
                    size += 1
                    k += 1
                else:
                    cp, width = decode_bmp(text, k, j)
                    plain = cp >= 0 and plain_cp[cp] != 0
                    if plain:
                        size += cp_len[cp]
                    k += width
            if plain:
                peak, need = n_prefix + size + 8, n_prefix + size + 8
            else:
                peak, need = _bounds(text, i, j, ops, flags, cp_len, growth[0])
            if peak > src.shape[0] or need > words.shape[0]:
                return n_out, n_spans, i, np.int64(max(peak, need, 2 * src.shape[0]))
            if n_out + need > out.shape[0]:
                return n_out, n_spans, i, np.int64(0)
            first = n_out
            if plain:
                for k in range(n_prefix):
                    words[k] = plain_prefix[1 + k]
                m = n_prefix
                k = i
                while k < j:
                    byte = text[k]
                    if byte < 0x80:
                        words[m] = plain_map[byte]
                        m += 1
                        k += 1
                    else:
                        cp, width = decode_bmp(text, k, j)
                        for t in range(cp_start[cp], cp_start[cp] + cp_len[cp]):
                            words[m] = cp_blob[t]
                            m += 1
                        k += width
                bounds[0, 0] = 0
                bounds[0, 1] = m
                n_words = 1
            else:
                n_words = pre_tokenize(text, i, j, flags, cp_start, cp_len, cp_blob, marks, ops, op_blob, pretok, src,
                                       dst, words, bounds)
            general = not plain or not cacheable  # its words are worth remembering on their own
            w = 0
            while w < n_words and n_out >= 0:
                a, b = bounds[w, 0], bounds[w, 1]
                w += 1
                word_slot, word_key = np.int64(-1), np.uint64(0)
                w0 = w1 = w2 = np.uint64(0)
                if general and b - a <= CHUNK_BYTES and not by_parts:  # a word of an unknown chunk: maybe seen
                    w0, w1, w2 = packed(words, a, b - a)
                    wh = packed_hash(w0, w1, w2)
                    word_slot = set_of(wh, cache)
                    word_key = row_key(wh, b - a, WORD_FLAG)
                    row = probe_packed(cache, word_slot, word_key, w0, w1, w2)
                    if row >= 0:
                        n_out = copy_ids(cache_ints, row, out, n_out)
                        continue
                before = n_out
                if by_parts and general:  # the word's parts (no merge crosses them), each cached
                    n_parts = bpe_parts(words, a, b, b_blob, b_starts, b_lengths, b_ids, b_slots, b_chars, p_table,
                                        b_bytes, b_fallback, parts)
                    for r in range(n_parts):
                        pa, pb = parts[r, 0], parts[r, 1]
                        part_slot, part_key = np.int64(-1), np.uint64(0)
                        p0 = p1 = p2 = np.uint64(0)
                        if pb - pa <= CHUNK_BYTES:
                            p0, p1, p2 = packed(words, pa, pb - pa)
                            ph = packed_hash(p0, p1, p2)
                            part_slot = set_of(ph, cache)
                            part_key = row_key(ph, pb - pa, WORD_FLAG)
                            row = probe_packed(cache, part_slot, part_key, p0, p1, p2)
                            if row >= 0:
                                n_out = copy_ids(cache_ints, row, out, n_out)
                                continue
                        part_first = n_out
                        n_out = merge_part(words, pa, pb, b_blob, b_starts, b_lengths, b_ids, b_slots, b_chars,
                                           b_merges, b_bytes, b_fallback, b_fuse, b_unk_mode, b_unk, symbols, out,
                                           n_out)
                        if n_out < 0:
                            break
                        if part_slot >= 0:
                            insert_packed(cache, cache_ints, part_slot, part_key, p0, p1, p2, out, part_first,
                                          n_out)
                    word_slot = np.int64(-1)  # the parts are cached, not the word
                elif is_bpe:
                    n_out = bpe_ids(words, a, b, b_blob, b_starts, b_lengths, b_ids, b_slots, b_chars, b_merges,
                                    p_table, b_bytes, b_fallback, b_fuse, b_ignore, b_unk_mode, b_unk, symbols, parts,
                                    out, n_out)
                else:
                    n_out = viterbi_ids(words, a, b, cells, u_scores, u_bytes, u_unk,
                                        unk_score, u_fallback, best_score, best_start, symbols, out, n_out)
                if word_slot >= 0 and n_out >= 0:
                    insert_packed(cache, cache_ints, word_slot, word_key, w0, w1, w2, out, before, n_out)
            if n_words >= 0 and n_out >= 0:
                if cacheable:
                    insert_packed(cache, cache_ints, slot, key, k0, k1, k2, out, first, n_out)
                open_span = False
            else:
                n_out = first
                if open_span:
                    spans[n_spans - 1, 1] = j
                else:
                    spans[n_spans, 0] = i
                    spans[n_spans, 1] = j
                    spans[n_spans, 2] = n_out
                    n_spans += 1
                    open_span = True
    return n_out, n_spans, n, np.int64(0)
