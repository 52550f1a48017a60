"""Facts about components of `tokenizers` that more than one part of the adapter needs: the
ByteLevel byte alphabet, what a normalizer that does nothing looks like, a tokenizer's normalizer as
a function of a string and the visible characters it makes invisible."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from functools import lru_cache

from tokenizers import Tokenizer


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


def normalizer_function(config: dict) -> Callable[[str], str]:
    """The tokenizer's (parsed tokenizer.json) normalizer as a function of a string."""
    if is_no_op_normalizer(config.get("normalizer")):
        return lambda text: text
    return normalizer_of(json.dumps(config["normalizer"], sort_keys=True))


@lru_cache(maxsize=8)
def normalizer_of(normalizer_json: str) -> Callable[[str], str]:
    """The real normalizer of a normalizer's JSON, as a function of a string."""
    shell = {"version": "1.0", "normalizer": json.loads(normalizer_json), "pre_tokenizer": None,
             "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}
    return Tokenizer.from_str(json.dumps(shell)).normalizer.normalize_str


@lru_cache(maxsize=8)
def invisible_characters(normalizer_json: str) -> frozenset[str]:
    """Visible characters (letters, marks, numbers, punctuation, symbols) the normalizer turns into
    nothing or into something that ends in whitespace, a control or a format character."""
    normalize = normalizer_of(normalizer_json)
    found = set()
    for cp in range(0x110000):
        char = chr(cp)
        if unicodedata.category(char)[0] not in "LNMPS" or 0xD800 <= cp < 0xE000:
            continue
        out = normalize(char)
        if not out or unicodedata.category(out[-1])[0] not in "LNMPS":
            found.add(char)
    return frozenset(found)
