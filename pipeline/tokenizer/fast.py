"""The fast tokenization backend: one jitted kernel per tokenizer family (`families.FAMILIES`) for
what it can prove, the real tokenizer for the rest, with ids identical to the real tokenizer's.

`choose_backend` gives a tokenizer the fast path only where its family covers it exactly
(`--tokenizer_backend auto` otherwise falls back to the real tokenizer everywhere and says which
family and why; `fast` refuses, naming what is unsupported).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenizer.content import content_tokenizer_json, special_ids_of
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.families import CutRule, Family, support
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES
from pipeline.tokenizer.table_cache import CACHE_ENV
from pipeline.tokenizer.wordpiece.fast import probe_code_points, wordpiece_support_and_case
from schemas.options import BACKEND_AUTO, BACKEND_FAST, BACKEND_HF, TOKENIZER_BACKENDS

__all__ = ["CACHE_ENV", "FastTokenizer", "UnsupportedTokenizer", "choose_backend", "fast_support",
           "probe_code_points"]


def fast_support(config: dict) -> tuple[list[str], bool]:
    """What the fast path cannot reproduce of a tokenizer (empty when its family covers it), and
    whether it lower-cases (WordPiece normalizers only; False for the other families)."""
    family, problems = support(config)
    if family is not None and family.name == "WordPiece":
        return problems, wordpiece_support_and_case(config)[1]
    return problems, False


def _why(family: Family | None, problems: list[str]) -> list[str]:
    prefix = f"{family.name} family: " if family is not None else ""
    return [prefix + problem for problem in problems]


def choose_backend(requested: str, tokenizer_json: str) -> tuple[str, list[str]]:
    """The backend a run uses and, when it is not `fast`, why (naming the tokenizer's family).

    Raises:
        UnsupportedTokenizer: `fast` was asked for and the tokenizer is not covered.
        ValueError: an unknown backend name.
    """
    if requested not in TOKENIZER_BACKENDS:
        raise ValueError(f"--tokenizer_backend must be one of {TOKENIZER_BACKENDS}, got {requested!r}")
    if requested == BACKEND_HF:
        return BACKEND_HF, ["--tokenizer_backend hf"]
    family, problems = support(json.loads(tokenizer_json))
    if not problems:
        return BACKEND_FAST, []
    why = _why(family, problems)
    if requested == BACKEND_FAST:
        raise UnsupportedTokenizer("--tokenizer_backend fast cannot reproduce this tokenizer exactly: "
                                   + "; ".join(why) + " (use --tokenizer_backend auto or hf)")
    assert requested == BACKEND_AUTO
    return BACKEND_HF, why


class FastTokenizer:
    """Encodes text as the given real tokenizer does (special-token strings as plain text, no
    special tokens added) with its family's fast path.

    Attributes:
        family: the family's name. cuts: where its text may be cut (see `families.CutRule`).
    """

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        config = json.loads(tokenizer_json)
        family, problems = support(config)
        if problems:
            raise UnsupportedTokenizer("; ".join(_why(family, problems)))
        self.tokenizer = tokenizer
        self.family = family.name
        self.cuts: CutRule = family.cuts(config, tokenizer_json)
        # special pieces out of the content lattice, as on the hf backend (content.py)
        self._impl = family.make(tokenizer, content_tokenizer_json(tokenizer_json,
                                                                   special_ids_of(config, SPECIAL_CANDIDATES)))

    @property
    def tables(self):
        """The family kernel's tables (for tests and benchmarks)."""
        return self._impl.tables

    def encode(self, text: str) -> np.ndarray:
        """Content ids of `text`, int32, shape (n,)."""
        return self._impl.encode(text)

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Content ids of UTF-8 `data`, int32, shape (n,)."""
        return self._impl.encode_bytes(data)

    def encode_many(self, texts: Iterable[str]) -> list[np.ndarray]:
        return [self.encode(text) for text in texts]
