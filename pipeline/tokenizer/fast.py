"""The fast tokenization backend: one jitted kernel per tokenizer family (the registry,
`families.FAMILIES`) for what it can prove, the real tokenizer for the rest, with ids identical to
the real tokenizer's.

`choose_backend` gives a tokenizer the fast path only where its family covers it exactly
(`--tokenizer_backend auto` otherwise falls back to the real tokenizer everywhere and says which
family and why; `fast` refuses, naming what is unsupported).
"""

from __future__ import annotations

import json

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenizer.added_tokens import AddedTokenSplitter, plain_added, without_plain_added
from pipeline.tokenizer.content import content_tokenizer_json, special_ids_of
from pipeline.tokenizer.cut_rule import CutRule
from pipeline.tokenizer.errors import UnsupportedTokenizer, family_reasons
from pipeline.tokenizer.facts import TokenizerFacts
from pipeline.tokenizer.families import family_cuts, support
from pipeline.tokenizer.parsed import parsed, recorded_json, release_parses, remember
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES
from schemas.options import BACKEND_AUTO, BACKEND_FAST, BACKEND_HF, TOKENIZER_BACKENDS

__all__ = ["FastTokenizer", "UnsupportedTokenizer", "choose_backend", "fast_support"]


def fast_support(config: dict) -> list[str]:
    """What the fast path cannot reproduce of a tokenizer (empty when its family covers it)."""
    return support(config)[1]


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
    family, problems = support(parsed(tokenizer_json))
    if not problems:
        return BACKEND_FAST, []
    name = None if family is None else family.name
    if requested == BACKEND_FAST:
        raise UnsupportedTokenizer(problems, name, requested=True)
    assert requested == BACKEND_AUTO
    return BACKEND_HF, family_reasons(name, problems)


class FastTokenizer:
    """Encodes text as the given real tokenizer does (special-token strings as plain text, no
    special tokens added) with its family's fast path; non-special added tokens are split out first
    (`added_tokens.AddedTokenSplitter`) and the family's encoder, built without them, gets the rest.

    Attributes:
        family: the tokenizer's `Family` (from the registry). cuts: where its text may be cut
        (`cut_rule.CutRule`). slice_chars: the most characters the family's encoder is given at
        once (None: any text whole).
    """

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        config = parsed(tokenizer_json)  # shared: read only
        family, problems = support(config)
        if problems:
            raise UnsupportedTokenizer(problems, None if family is None else family.name)
        self.tokenizer = tokenizer
        self.family = family
        self.cuts: CutRule = family_cuts(family, config, tokenizer_json)
        self.slice_chars = family.slice_chars
        # special pieces out of the content lattice, as on the hf backend (content.py)
        content = content_tokenizer_json(tokenizer_json, special_ids_of(config, SPECIAL_CANDIDATES))
        if recorded_json(tokenizer) == content:  # built by spec.build_tokenizer: its guard from this
            # parse, before the parses go (encode.guard_of would parse its JSON again)
            TokenizerFacts.of(tokenizer, config if content is tokenizer_json else parsed(content), content)
        self._added = None
        if plain_added(config):
            self._added = AddedTokenSplitter(config)
            without = without_plain_added(config if content is tokenizer_json else parsed(content))
            content = remember(json.dumps(without, ensure_ascii=False), without)  # the family reads it unparsed
            inner = Tokenizer.from_str(content)  # the family's own fallbacks must not match added tokens
            inner.encode_special_tokens = True
            self._impl = family.make(inner, content)
        else:
            self._impl = family.make(tokenizer, content)
        release_parses()  # built: the tables hold what the JSON said

    @property
    def tables(self):
        """The family kernel's tables (for tests and benchmarks)."""
        return self._impl.tables

    def encode(self, text: str) -> np.ndarray:
        """Content ids of `text`, int32, shape (n,)."""
        if self._added is None:
            return self._impl.encode(text)
        return self._added.encode(text, self._impl.encode, self._real)

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Content ids of UTF-8 `data`, int32, shape (n,)."""
        if self._added is None or not self._added.may_match_bytes(data):
            return self._impl.encode_bytes(data)
        return self.encode(data.decode("utf-8", "surrogatepass"))

    def _real(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int32)
