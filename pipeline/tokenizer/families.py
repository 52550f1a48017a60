"""The registry of fast tokenizer families, and where each family's text may be cut.

A family is one entry: whether a tokenizer belongs to it (`claims`), what of that tokenizer its fast
path cannot reproduce (`support`: problems, empty when covered), the class that encodes with it
(`make(tokenizer, tokenizer_json)` with `.encode(text)` and `.encode_bytes(data)` giving int32 ids),
and its *cut rule*: the places where the family's own pre-tokenizer is guaranteed to cut, so that
text cut there and encoded piece by piece gives the ids of the whole text.

Adding a family is adding one `Family` to FAMILIES: WordPiece, byte-level BPE and SentencePiece
(`pipeline.tokenizer.sentencepiece.fast`: Unigram or byte-fallback BPE behind Metaspace or Prepend+Replace).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenizer.bytelevel import fast as bytelevel_fast
from pipeline.tokenizer.sentencepiece import fast as sentencepiece
from pipeline.tokenizer.wordpiece import fast as wordpiece_fast


class FamilyEncoder(Protocol):
    def encode(self, text: str) -> np.ndarray: ...

    def encode_bytes(self, data: bytes) -> np.ndarray: ...


@dataclass(frozen=True)
class CutRule:
    """Where text may be cut without changing its ids: before a character of `before`, and with
    `after_visible` only when the character before the cut is visible (a letter, digit, mark,
    punctuation or symbol: never whitespace, a control or format character). With `left`/`right`
    the characters just before and just after the cut character must be among them. With `drop`
    the cut character belongs to neither part (the right part starts after it): a tokenizer that
    prefixes every text with its word marker encodes the dropped space as that prefix. `invisible`:
    characters that count as not visible although their category is (a normalizer turns them into
    nothing or into something ending in whitespace)."""

    before: str
    after_visible: bool
    drop: bool = False
    left: str | None = None
    right: str | None = None
    invisible: frozenset[str] = frozenset()

    def allows(self, text: str, position: int) -> bool:
        """Whether text may be cut before text[position] (0 < position < len(text))."""
        if text[position] not in self.before:
            return False
        previous = text[position - 1]
        if self.left is not None:
            return position + 1 < len(text) and previous in self.left and text[position + 1] in self.right
        if not self.after_visible:
            return True
        if previous in self.invisible:
            return False
        if "!" <= previous <= "~":
            return True
        return previous > "\x7f" and _visible(previous)

    @property
    def skip(self) -> int:
        """Characters between a cut and the start of the right part (1 with `drop`)."""
        return int(self.drop)


def _visible(char: str) -> bool:
    import unicodedata

    return unicodedata.category(char)[0] in "LNMPS"


# Whitespace-splitting pre-tokenizers (BertPreTokenizer) cut at any ASCII whitespace.
WHITESPACE_CUTS = CutRule(" \t\n\r", after_visible=False)
# A space after a visible character starts a new word in every regex and Metaspace pre-tokenizer
# we know (and keeps add_prefix_space / prepend_scheme from adding anything to the next part).
SPACE_CUTS = CutRule(" ", after_visible=True)
# Without a prefix space, any ASCII whitespace after a visible character starts a new pre-token
# of the GPT-2 regex; the Llama-3 regex's punctuation runs take the newlines after them
# (` ?[^\s\p{L}\p{N}]+[\r\n]*`), so there only spaces and tabs.
REGEX_CUTS = CutRule(" \t\n\r", after_visible=True)
LLAMA3_CUTS = CutRule(" \t", after_visible=True)
SENTENCEPIECE = "SentencePiece"
# A tokenizer that sees the whole text as one piece (SentencePiece without split): never cut.
NO_CUTS = CutRule("", after_visible=True)


@dataclass(frozen=True)
class Family:
    name: str
    claims: Callable[[dict], bool]
    support: Callable[[dict], list[str]]
    make: Callable[[Tokenizer, str], FamilyEncoder]
    cuts: Callable[[dict, str], CutRule]  # (the parsed tokenizer JSON, the JSON text itself)


def _bytelevel_cuts(config: dict, tokenizer_json: str) -> CutRule:
    pattern, prefix_space, _ = bytelevel_fast.pre_tokenizer_shape(config)
    if prefix_space:
        return SPACE_CUTS
    return REGEX_CUTS if pattern == bytelevel_fast.GPT2_PATTERN else LLAMA3_CUTS


def _sentencepiece_cuts(config: dict, tokenizer_json: str) -> CutRule:
    """The SentencePiece family's cuts, from its kernel's own analysis of the tokenizer (which ASCII
    neighbours of a space the normalizer keeps as they are, and whether every part gets a `▁`).
    The analysis is cached by the JSON text: given the text the encoder gets, it is done once (2-3 s)."""
    if sentencepiece.sentencepiece_support(config):
        return NO_CUTS  # not analysed by the kernel: whole documents, exact on any backend
    found = sentencepiece.sentencepiece_cut_chars(tokenizer_json)
    if found is None:
        return NO_CUTS
    mode, left, right = found
    return CutRule(" ", after_visible=True, drop=mode == "drop", left=left, right=right)


def _sentencepiece_claims(config: dict) -> bool:
    model = config.get("model") or {}
    return model.get("type") == "Unigram" or '"Metaspace"' in json.dumps(config.get("pre_tokenizer")) \
        or "\u2581" in json.dumps(config.get("normalizer"), ensure_ascii=False) or bool(model.get("byte_fallback"))


FAMILIES: list[Family] = [
    Family(wordpiece_fast.FAMILY, wordpiece_fast.claims, wordpiece_fast.wordpiece_support,
           wordpiece_fast.WordPieceFastTokenizer, lambda config, tokenizer_json: WHITESPACE_CUTS),
    Family(bytelevel_fast.FAMILY, bytelevel_fast.claims, bytelevel_fast.bytelevel_support,
           bytelevel_fast.ByteLevelFastTokenizer, _bytelevel_cuts),
    Family(SENTENCEPIECE, _sentencepiece_claims, sentencepiece.sentencepiece_support,
           sentencepiece.SentencePieceFastTokenizer, _sentencepiece_cuts),
]


def family_of(config: dict) -> Family | None:
    """The family a tokenizer belongs to, or None."""
    return next((family for family in FAMILIES if family.claims(config)), None)


def describe(config: dict) -> str:
    """A tokenizer's shape in words, for the log: model and pre-tokenizer types."""
    model = (config.get("model") or {}).get("type")
    pre = config.get("pre_tokenizer") or {}
    kinds = [step.get("type") for step in pre.get("pretokenizers", [])] if pre.get("type") == "Sequence" \
        else [pre.get("type")]
    return f"model {model} with pre-tokenizer {'+'.join(str(k) for k in kinds)}"


def support(config: dict) -> tuple[Family | None, list[str]]:
    """(the tokenizer's family, what its fast path cannot reproduce); problems are never empty
    when no family claims the tokenizer."""
    family = family_of(config)
    if family is None:
        names = ", ".join(f.name for f in FAMILIES)
        return None, [f"no fast family for a {describe(config)} (fast families: {names})"]
    return family, family.support(config)


def covered_family_cuts(config: dict) -> CutRule | None:
    """The cut rule of the family whose fast path covers the tokenizer exactly, or None (no family
    covers it: its cuts must be derived from the tokenizer itself, `derived_cuts`)."""
    family, problems = support(config)
    if family is None or problems:
        return None
    return family.cuts(config, json.dumps(config, ensure_ascii=False))
