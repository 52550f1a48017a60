"""Facts about components of `tokenizers` that more than one part of the adapter needs: the
ByteLevel byte alphabet and what a normalizer that does nothing looks like."""

from __future__ import annotations


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-unicode alphabet (`bytes_char` in tokenizers' byte_level.rs)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return chars


BYTE_CHARS = _byte_chars()
CHAR_BYTES = {c: b for b, c in BYTE_CHARS.items()}


def is_no_op_normalizer(normalizer: dict | None) -> bool:
    """None, or a Sequence of no normalizers (nested Sequences of none included): text unchanged."""
    if normalizer is None:
        return True
    return normalizer.get("type") == "Sequence" and all(
        isinstance(child, dict) and is_no_op_normalizer(child) for child in normalizer.get("normalizers") or [])
