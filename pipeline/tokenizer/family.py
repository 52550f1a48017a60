"""What a fast tokenizer family is (`Family`), and the questions about a parsed tokenizer.json that
every family's claim asks (which component types its trees hold, which strings they mention).

Each family package defines its `Family` (`pipeline.tokenizer.<family>.family`); the registry,
`families.py`, lists them. Nothing else names a family: the rest of the adapter asks the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenizer.cut_rule import CutRule

# The characters a family's encoder is given at a time by default: its buffers are a few times its input.
SLICE_CHARS = 1 << 20


class FamilyEncoder(Protocol):
    tables: object

    def encode(self, text: str) -> np.ndarray: ...

    def encode_bytes(self, data: bytes) -> np.ndarray: ...


@dataclass(frozen=True)
class Family:
    """A fast tokenizer family.

    Attributes:
        name: how messages name it ("WordPiece").
        claims: whether a tokenizer (its parsed JSON) belongs to the family; the first family of
            the registry that claims it is its family.
        support: what of a claimed tokenizer the family's fast path cannot reproduce (empty: covered).
        make: the encoder, `make(tokenizer, tokenizer_json)`, with `.encode(text)` and
            `.encode_bytes(data)` giving int32 ids and `.tables` (for tests and benchmarks).
        cuts: the family's cut rule, `cuts(config, tokenizer_json)` (the parsed JSON and its text):
            the places where its pre-tokenizer is guaranteed to cut, so that text cut there and
            encoded piece by piece gives the ids of the whole text.
        continues_word: `continues_word(config)` tells, of a token string, whether it continues the
            word before it (whole-word masking keeps such tokens with their word).
        slice_chars: the most characters the encoder is given at once (None: any text whole, the
            kernel bounds its own buffers).
    """

    name: str
    claims: Callable[[dict], bool]
    support: Callable[[dict], list[str]]
    make: Callable[[Tokenizer, str], FamilyEncoder]
    cuts: Callable[[dict, str], CutRule]
    continues_word: Callable[[dict], Callable[[str], bool]]
    slice_chars: int | None = SLICE_CHARS


def _nodes(node: object) -> Iterator[dict]:
    """Every object (dict) in a parsed JSON tree, the tree's own included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def holds_type(node: object, kind: str) -> bool:
    """Whether a component tree (a normalizer or pre-tokenizer, Sequences at any depth) holds a
    component of type `kind`."""
    return any(child.get("type") == kind for child in _nodes(node))


def _strings(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def mentions(node: object, text: str) -> bool:
    """Whether any string of a parsed JSON tree (a key or a value) contains `text`."""
    return any(text in string for string in _strings(node))


def marker_rule(marker: str) -> Callable[[dict], Callable[[str], bool]]:
    """`continues_word` of a family whose word-start tokens begin with `marker` (byte-level BPE's
    `Ġ`, SentencePiece's `▁`); a model with a `continuing_subword_prefix` marks continuations instead."""

    def continues_word(config: dict) -> Callable[[str], bool]:
        prefix = (config.get("model") or {}).get("continuing_subword_prefix")
        if prefix:
            return lambda token: token.startswith(prefix)
        return lambda token: not token.startswith(marker)

    return continues_word
