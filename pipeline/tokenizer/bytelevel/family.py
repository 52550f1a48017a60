"""The byte-level BPE family (GPT-2, RoBERTa, ModernBERT, Llama-3, OLMo) as the registry lists it."""

from __future__ import annotations

import json
from dataclasses import replace

from pipeline.tokenizer.bytelevel.fast import (
    FAMILY,
    GPT2_PATTERN,
    ByteLevelFastTokenizer,
    bytelevel_support,
    pre_tokenizer_shape,
    split_chain,
)
from pipeline.tokenizer.bytelevel.split_program import chain_cuts
from pipeline.tokenizer.components import invisible_characters, is_no_op_normalizer
from pipeline.tokenizer.cut_rule import LLAMA3_CUTS, REGEX_CUTS, SPACE_CUTS, CutRule
from pipeline.tokenizer.family import Family, holds_type, marker_rule


def claims(config: dict) -> bool:
    """Whether a tokenizer belongs to this family (a BPE model behind a ByteLevel pre-tokenizer)."""
    model = config.get("model") or {}
    return model.get("type") == "BPE" and holds_type(config.get("pre_tokenizer"), "ByteLevel")


def cuts(config: dict, tokenizer_json: str) -> CutRule:
    """At a space after a visible character with a prefix space; else where the regex starts a
    new pre-token after one (any ASCII whitespace for GPT-2's, spaces and tabs for Llama-3's and
    for a compiled Split chain that proves them, `split_program.chain_cuts`). Behind an NFC / NFKC
    normalizer a character it turns into nothing or into something ending in whitespace is not
    visible."""
    pattern, prefix_space, _ = pre_tokenizer_shape(config)
    chain = None if prefix_space else split_chain(config)
    if prefix_space:
        rule = SPACE_CUTS
    elif chain is not None:
        rule = chain_cuts(chain)
    else:
        rule = REGEX_CUTS if pattern == GPT2_PATTERN else LLAMA3_CUTS
    if is_no_op_normalizer(config.get("normalizer")):
        return rule
    return replace(rule, invisible=invisible_characters(json.dumps(config["normalizer"], sort_keys=True)))


# The kernel bounds its own buffers and reads a str's kept UTF-8 (a slice has none): texts go whole.
BYTE_LEVEL = Family(FAMILY, claims, bytelevel_support, ByteLevelFastTokenizer, cuts, marker_rule("\u0120"),
                    slice_chars=None)
