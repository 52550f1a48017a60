"""SentencePiece-style text handling before the model: safe cuts, the normalizer and the
Metaspace pre-tokenizer of one chunk (the loop over chunks, the chunk cache and the model calls
are in `pipeline.kernels.tokenizer.sentencepiece.encode`).

The text is cut into *chunks* at safe cuts (`CUT_DROP`: an ASCII space between two chosen ASCII
characters, the space itself belonging to neither side; `CUT_KEEP`: before such a space, which
opens the right chunk; `CUT_NONE`: never). A safe cut is one where encoding the parts as texts
of their own and concatenating gives the ids of the whole (`pipeline.tokenizer.sentencepiece.fast`
chooses the mode and the characters from the tokenizer's configuration and vocabulary), so every
chunk is encoded exactly like a whole text:

1. normalizer: every character through a per-code-point table (the output of the tokenizer's
   per-character normalizers, probed on that character alone), then the *tail* operations that
   look at more than one character (OP_*), in the configured order;
2. pre-tokenizer: optionally split at Unicode whitespace (WhitespaceSplit), then Metaspace:
   spaces become `▁`, one `▁` is prepended unless the text starts with one, and with `split` a
   word starts at every `▁`; then, where the tokenizer has one, an isolated `Split` of single
   literal characters (the pieces a SentencePiece model emits whole, as transformers' converter
   writes them: `,|\\(|\\)`): each such character becomes a word of its own (`_isolate`);
3. model: Unigram Viterbi or byte-fallback BPE per word.

A chunk holding a character the table does not vouch for (flag 0: a combining mark, a Hangul jamo,
a format character, a code point beyond the BMP, invalid UTF-8, ...) is not encoded here: maximal
runs of such chunks are returned as fallback spans for the real tokenizer, their ids spliced in at
the recorded position.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import helper, kernel
from pipeline.kernels.common.utf8 import decode_bmp, decode_valid

CUT_NONE, CUT_DROP, CUT_KEEP = 0, 1, 2
# Tail operations of the normalizer: (opcode, pattern start, pattern length, content start, content length)
OP_REPLACE = 1  # every non-overlapping occurrence of a literal pattern, left to right (Replace, String)
OP_COLLAPSE_SPACES = 2  # runs of two or more ASCII spaces (Replace, Regex " {2,}")
OP_TRIM_SPACES = 3  # ASCII spaces at both ends removed (Replace, Regex "\A +| +\z", "")
OP_STRIP = 4  # Unicode whitespace at the left (pattern length 1) and/or right (content length 1) end (Strip)
OP_PREPEND = 5  # content before a non-empty text (Prepend)
OP_REPLACE_START = 6  # the pattern at the very start (Replace, Regex "\A<literal>")
OP_MAP = 7  # every character through the per-code-point table (the per-character normalizers, fused)
META = "\u2581"  # Metaspace's replacement for a space
# A combining diacritical mark (U+0300..U+036F) after a base letter below U+0250 that the probe found
# left as it is (`marks`): the pair is normalised as the letter's output and the mark's own bytes.
MARK_FIRST, MARK_COUNT, BASE_COUNT = 0x300, 0x70, 0x250
_META0, _META1, _META2 = META.encode()  # its UTF-8 bytes, which the kernels write and compare


@kernel()
def is_white(cp):
    """Rust's char::is_whitespace (the Unicode White_Space property)."""
    if cp <= 0x20:
        return cp == 0x20 or 0x09 <= cp <= 0x0D
    if cp < 0x85:
        return False
    return (cp == 0x85 or cp == 0xA0 or cp == 0x1680 or 0x2000 <= cp <= 0x200A or cp == 0x2028 or cp == 0x2029
            or cp == 0x202F or cp == 0x205F or cp == 0x3000)


@helper
def _apply_op(op, blob, src, m, dst):
    """One tail operation from src[:m] into dst; returns the new length."""
    code, p0, plen, c0, clen = op[0], op[1], op[2], op[3], op[4]
    k = 0
    if code == OP_REPLACE:
        i = 0
        while i < m:
            hit = plen > 0 and i + plen <= m
            if hit:
                for t in range(plen):
                    if src[i + t] != blob[p0 + t]:
                        hit = False
                        break
            if hit:
                for t in range(clen):
                    dst[k] = blob[c0 + t]
                    k += 1
                i += plen
            else:
                dst[k] = src[i]
                k += 1
                i += 1
        return k
    if code == OP_COLLAPSE_SPACES:
        i = 0
        while i < m:
            if src[i] == 32 and i + 1 < m and src[i + 1] == 32:
                while i < m and src[i] == 32:
                    i += 1
                for t in range(clen):
                    dst[k] = blob[c0 + t]
                    k += 1
            else:
                dst[k] = src[i]
                k += 1
                i += 1
        return k
    if code in (OP_TRIM_SPACES, OP_STRIP):
        a = np.int64(0)
        b = m
        if code == OP_TRIM_SPACES:
            while a < b and src[a] == 32:
                a += 1
            while b > a and src[b - 1] == 32:
                b -= 1
        else:
            if plen == 1:
                while a < b:
                    cp, width = decode_valid(src, a)
                    if not is_white(cp):
                        break
                    a += width
            if clen == 1:
                while b > a:
                    j = b - 1
                    while j > a and (src[j] & 0xC0) == 0x80:
                        j -= 1
                    cp, width = decode_valid(src, j)
                    if not is_white(cp):
                        break
                    b = j
        for i in range(a, b):
            dst[k] = src[i]
            k += 1
        return k
    if code == OP_PREPEND:
        if m > 0:
            for t in range(clen):
                dst[k] = blob[c0 + t]
                k += 1
        for i in range(m):
            dst[k] = src[i]
            k += 1
        return k
    # OP_REPLACE_START
    i = 0
    hit = plen <= m
    if hit:
        for t in range(plen):
            if src[t] != blob[p0 + t]:
                hit = False
                break
    if hit:
        for t in range(clen):
            dst[k] = blob[c0 + t]
            k += 1
        i = plen
    while i < m:
        dst[k] = src[i]
        k += 1
        i += 1
    return k


@helper
def _metaspace(norm, a, b, prepend, split, words, k, bounds, n_words):
    """Metaspace on norm[a:b], appended to words from k; each word's (start, stop) appended to bounds
    from n_words. Returns (k, n_words)."""
    first = k
    starts_meta = b - a >= 3 and norm[a] == _META0 and norm[a + 1] == _META1 and norm[a + 2] == _META2
    if prepend and b > a and not starts_meta and norm[a] != 32:
        words[k] = _META0
        words[k + 1] = _META1
        words[k + 2] = _META2
        k += 3
    for i in range(a, b):
        if norm[i] == 32:
            words[k] = _META0
            words[k + 1] = _META1
            words[k + 2] = _META2
            k += 3
        else:
            words[k] = norm[i]
            k += 1
    begin = first
    if split:
        for i in range(first + 1, k - 2):
            if words[i] == _META0 and words[i + 1] == _META1 and words[i + 2] == _META2:
                bounds[n_words, 0] = begin
                bounds[n_words, 1] = i
                n_words += 1
                begin = i
    if k > begin:
        bounds[n_words, 0] = begin
        bounds[n_words, 1] = k
        n_words += 1
    return k, n_words


@helper
def _map(src, m, flags, cp_start, cp_len, cp_blob, marks, dst):
    """The per-character normalizers on src[:m] into dst; -1 at a character the table does not vouch for.

    marks: uint8 (MARK_COUNT * BASE_COUNT,) or empty: 1 where a combining mark right after a vouched
    base letter is left as it is (one mark: a second one, or a mark after anything else, is not
    vouched for). What follows the mark is a vouched character or another chunk's: a starter that
    neither composes with the mark nor extends its grapheme."""
    k = 0
    j = np.int64(0)
    base = np.int64(-1)  # the code point before, where it is a vouched base letter for `marks`
    while j < m:
        byte = src[j]
        if byte < 0x80:
            cp = np.int64(byte)
            width = 1
        else:
            cp, width = decode_bmp(src, j, m)
            if cp < 0:
                return -1
        if flags[cp] == 0:
            if marks.shape[0] == 0 or base < 0 or not MARK_FIRST <= cp < MARK_FIRST + MARK_COUNT \
                    or marks[(cp - MARK_FIRST) * BASE_COUNT + base] == 0:
                return -1
            for t in range(width):
                dst[k] = src[j + t]
                k += 1
            j += width
            base = -1
            continue
        for t in range(cp_start[cp], cp_start[cp] + cp_len[cp]):
            dst[k] = cp_blob[t]
            k += 1
        j += width
        base = cp if cp < BASE_COUNT else -1
    return k


@helper
def _isolate(words, bounds, n_words, pretok):
    """Split every word at the isolated characters (pretok[6:], pretok[5] of them; Split behavior
    Isolated): each becomes a word of its own, the text around it words too. Returns the new count.

    The new bounds are written from the end of `bounds` backwards, last word first, then moved to the
    front: at most one word per byte of `words` results, and `bounds` has a row per byte of `words`,
    so the rows written never reach the row still to be read."""
    count = pretok[5]
    cap = bounds.shape[0]
    top = cap
    w = n_words - 1
    while w >= 0:
        a, b = bounds[w, 0], bounds[w, 1]
        w -= 1
        end = b
        i = b
        while i > a:
            i -= 1
            while i > a and (words[i] & 0xC0) == 0x80:
                i -= 1
            cp, width = decode_valid(words, i)
            hit = False
            for r in range(count):
                if pretok[6 + r] == cp:
                    hit = True
                    break
            if hit:
                if end > i + width:
                    top -= 1
                    bounds[top, 0] = i + width
                    bounds[top, 1] = end
                top -= 1
                bounds[top, 0] = i
                bounds[top, 1] = i + width
                end = i
        if end > a:
            top -= 1
            bounds[top, 0] = a
            bounds[top, 1] = end
    for r in range(cap - top):
        bounds[r, 0] = bounds[top + r, 0]
        bounds[r, 1] = bounds[top + r, 1]
    return cap - top


@kernel()
def pre_tokenize(text, a, b, flags, cp_start, cp_len, cp_blob, marks, ops, op_blob, pretok, src, dst, words, bounds):
    """Normalizer and pre-tokenizer on text[a:b] as a text of its own: the words' bytes into `words`
    and their (start, stop) into `bounds`; returns the number of words, or -1 to hand the chunk to
    the real tokenizer. pretok: [whitespace split, metaspace, prepend, split, is BPE] and, where the
    tokenizer isolates characters (`_isolate`), [their count, their code points...]."""
    m = b - a
    for t in range(m):
        src[t] = text[a + t]
    for r in range(ops.shape[0]):
        if ops[r, 0] == OP_MAP:
            m = _map(src, m, flags, cp_start, cp_len, cp_blob, marks, dst)
            if m < 0:
                return -1
        else:
            m = _apply_op(ops[r], op_blob, src, m, dst)
        src, dst = dst, src
    n_words = _words(src, m, pretok, words, bounds)
    if pretok.shape[0] > 5 and pretok[5] > 0 and n_words > 0:
        return _isolate(words, bounds, n_words, pretok)
    return n_words


@helper
def _words(src, m, pretok, words, bounds):
    """WhitespaceSplit and Metaspace (as configured) on the normalised src[:m]: the number of words."""
    ws_split, metaspace, prepend, split = pretok[0] != 0, pretok[1] != 0, pretok[2] != 0, pretok[3] != 0
    if not metaspace:
        for t in range(m):
            words[t] = src[t]
        bounds[0, 0] = 0
        bounds[0, 1] = m
        return np.int64(1) if m > 0 else np.int64(0)
    if not ws_split:
        zero = np.int64(0)  # no literal arguments: each would compile _metaspace once more
        return _metaspace(src, zero, m, prepend, split, words, zero, bounds, zero)[1]
    k = np.int64(0)
    n_words = np.int64(0)
    i = np.int64(0)
    while i < m:
        cp, width = decode_valid(src, i)
        if is_white(cp):
            i += width
            continue
        e = i
        while e < m:
            cp, width = decode_valid(src, e)
            if is_white(cp):
                break
            e += width
        k, n_words = _metaspace(src, i, e, prepend, split, words, k, bounds, n_words)
        i = e
    return n_words


@kernel()
def safe_cuts(text, cut_mode, cut_left, cut_right, out):
    """Byte positions of the safe cuts' spaces in text (uint8) into out; returns their count."""
    count = 0
    if cut_mode == CUT_NONE:
        return 0
    for j in range(1, text.shape[0] - 1):
        if text[j] == 32 and cut_left[text[j - 1]] != 0 and cut_right[text[j + 1]] != 0:
            out[count] = j
            count += 1
    return count
