"""The registry of fast tokenizer families: the one place that lists them.

A family (`family.Family`) says whether a tokenizer belongs to it, what of that tokenizer its fast
path cannot reproduce, the encoder that reproduces the rest, where its text may be cut and which
tokens continue a word. Each family package defines its own (`pipeline.tokenizer.<family>.family`);
adding a family is writing one and listing it in FAMILIES. Everything else asks the functions here.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pipeline.tokenizer.added_tokens import added_support, cuts_without_straddled, without_plain_added
from pipeline.tokenizer.bytelevel.family import BYTE_LEVEL
from pipeline.tokenizer.components import normalizer_function
from pipeline.tokenizer.cut_rule import CutRule
from pipeline.tokenizer.family import Family, marker_rule
from pipeline.tokenizer.sentencepiece.family import SENTENCEPIECE
from pipeline.tokenizer.wordpiece.family import WORDPIECE

# In order: the first family that claims a tokenizer is its family (a byte-fallback BPE behind a
# ByteLevel pre-tokenizer is byte-level BPE).
FAMILIES: list[Family] = [WORDPIECE, BYTE_LEVEL, SENTENCEPIECE]

# Which tokens continue a word in a tokenizer no family claims: its subword prefix, else tokens
# without GPT-2's `Ġ`, the word marker of most BPE vocabularies.
_UNCLAIMED_CONTINUES_WORD = marker_rule("\u0120")


def family_of(config: dict) -> Family | None:
    """The family a tokenizer (its parsed JSON) belongs to, or None."""
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
    when no family claims the tokenizer. Non-special added tokens are split out before the family's
    encoder (`added_tokens`), which never sees them."""
    family = family_of(config)
    if family is None:
        names = ", ".join(f.name for f in FAMILIES)
        return None, [f"no fast family for a {describe(config)} (fast families: {names})"]
    return family, family.support(without_plain_added(config)) + added_support(config)


def family_cuts(family: Family, config: dict, tokenizer_json: str) -> CutRule:
    """A covered tokenizer's cut rule: its family's, less the cut characters an added token could straddle."""
    return cuts_without_straddled(config, family.cuts(config, tokenizer_json), normalizer_function(config))


def covered_family_cuts(config: dict, tokenizer_json: str | None = None) -> CutRule | None:
    """The cut rule of the family whose fast path covers the tokenizer exactly, or None (no family
    covers it: its cuts must be derived from the tokenizer itself, `derived_cuts`). `tokenizer_json`:
    the text `config` was parsed from, where the caller has it (a family may cache by it)."""
    family, problems = support(config)
    if family is None or problems:
        return None
    return family_cuts(family, config,
                       json.dumps(config, ensure_ascii=False) if tokenizer_json is None else tokenizer_json)


def continues_word(config: dict) -> Callable[[str], bool]:
    """Whether a token string continues the word before it, by the tokenizer's family's rule."""
    family = family_of(config)
    return (_UNCLAIMED_CONTINUES_WORD if family is None else family.continues_word)(config)
