"""The error every fast tokenizer family raises for what it cannot reproduce exactly."""

from __future__ import annotations


class UnsupportedTokenizer(ValueError):
    """`--tokenizer_backend fast` on a tokenizer the fast path cannot reproduce exactly."""
