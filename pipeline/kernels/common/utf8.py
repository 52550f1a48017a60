"""The one UTF-8 decoder of the kernels: a code point and its width in bytes at a byte position.

Kernels meet UTF-8 in three conditions, so the decoder has three entry points over one bit
assembly (`_assemble`):

- `decode(text, i, n)`: bytes of unknown validity (raw input, a chunk of text): (-1, 1) at an
  invalid sequence (a stray continuation byte, a bad lead, C0/C1, F5..FF, an overlong or truncated
  sequence, a surrogate, beyond U+10FFFF), so the caller can hand what follows to the real
  tokenizer. `decode_bmp` is the same but also says (-1, 1) for a valid character beyond the BMP,
  for callers whose per-code-point tables stop at BMP.
- `decode_valid(text, i)`: bytes the caller knows are valid (normalised words made from the
  tables, text already checked); no check, no bound: `utf8_width(lead)` bytes are read.
- `decode_lenient(text, i, n)`: counting, not tokenizing (the script counts of raw file bytes cut
  anywhere): continuation bytes are not checked, a lead byte with too few bytes left falls back
  to the longest width that fits, only a byte that cannot lead (a continuation byte) or a
  truncated two-byte sequence says (-1, 1). Lone surrogates written with `surrogatepass` decode
  to their code point.

All are jitted with `inline="always"`: they sit in the kernels' hot loops (after an ASCII fast
path) and numba then compiles them into the caller's loop.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import kernel

BMP = 0x10000  # code points below it: what the per-code-point tables cover
MAX_CODE_POINT = 0x10FFFF

__all__ = ["BMP", "MAX_CODE_POINT", "decode", "decode_bmp", "decode_lenient", "decode_valid", "utf8_width"]


@kernel(inline="always")
def utf8_width(lead):
    """Bytes of the UTF-8 sequence that starts with byte `lead` (valid UTF-8 assumed)."""
    if lead < 0x80:
        return 1
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


@kernel(inline="always")
def _assemble(text, i, size):
    """The code point of the `size`-byte sequence at text[i] (2 to 4; nothing checked)."""
    b0 = np.int64(text[i])
    if size == 2:
        return ((b0 & 0x1F) << 6) | (np.int64(text[i + 1]) & 0x3F)
    if size == 3:
        return ((b0 & 0x0F) << 12) | ((np.int64(text[i + 1]) & 0x3F) << 6) | (np.int64(text[i + 2]) & 0x3F)
    return (((b0 & 0x07) << 18) | ((np.int64(text[i + 1]) & 0x3F) << 12) | ((np.int64(text[i + 2]) & 0x3F) << 6)
            | (np.int64(text[i + 3]) & 0x3F))


@kernel(inline="always")
def _continues(text, i, size):
    """Whether text[i + 1:i + size] are all continuation bytes (10xxxxxx)."""
    good = True
    for k in range(i + 1, i + size):
        good = good and (text[k] & 0xC0) == 0x80
    return good


@kernel(inline="always")
def decode_valid(text, i):
    """(code point, bytes) of the UTF-8 sequence at text[i], which the caller knows is valid."""
    size = utf8_width(text[i])
    if size == 1:
        return np.int64(text[i]), 1
    return _assemble(text, i, size), size


@kernel(inline="always")
def decode(text, i, n):
    """(code point, bytes) of the UTF-8 sequence at text[i] (i < n, nothing read at or past n);
    (-1, 1) where it is not valid UTF-8."""
    b0 = text[i]
    if b0 < 0x80:
        return np.int64(b0), 1
    size = 0
    if 0xC2 <= b0 < 0xE0:
        size = 2
    elif 0xE0 <= b0 < 0xF0:
        size = 3
    elif 0xF0 <= b0 < 0xF5:
        size = 4
    if size == 0 or i + size > n or not _continues(text, i, size):
        return np.int64(-1), 1
    cp = _assemble(text, i, size)
    if size == 3 and (cp < 0x800 or 0xD800 <= cp < 0xE000):
        return np.int64(-1), 1
    if size == 4 and (cp < BMP or cp > MAX_CODE_POINT):
        return np.int64(-1), 1
    return cp, size


@kernel(inline="always")
def decode_bmp(text, i, n):
    """`decode`, with (-1, 1) for a valid character beyond the BMP too."""
    cp, size = decode(text, i, n)
    if cp >= BMP:
        return np.int64(-1), 1
    return cp, size


@kernel(inline="always")
def decode_lenient(text, i, n):
    """(code point, bytes) at text[i] with continuation bytes unchecked (see the module's docstring);
    (-1, 1) at a byte that cannot lead or a two-byte lead at the end."""
    b0 = text[i]
    if b0 < 0x80:
        return np.int64(b0), 1
    if b0 >= 0xF0 and i + 3 < n:
        return _assemble(text, i, 4), 4
    if b0 >= 0xE0 and i + 2 < n:
        return _assemble(text, i, 3), 3
    if b0 >= 0xC0 and i + 1 < n:
        return _assemble(text, i, 2), 2
    return np.int64(-1), 1
