"""The SentencePiece family (Unigram or byte-fallback BPE behind Metaspace, or Prepend + Replace) as
the registry lists it."""

from __future__ import annotations

from pipeline.tokenizer.cut_rule import NO_CUTS, CutRule
from pipeline.tokenizer.family import Family, holds_type, marker_rule, mentions
from pipeline.tokenizer.sentencepiece.fast import (
    FAMILY,
    META,
    SentencePieceFastTokenizer,
    sentencepiece_cut_chars,
    sentencepiece_support,
)


def claims(config: dict) -> bool:
    """Whether a tokenizer belongs to this family: a Unigram model, a Metaspace pre-tokenizer, a
    normalizer that writes `▁`, or a model with byte fallback."""
    model = config.get("model") or {}
    return (model.get("type") == "Unigram" or holds_type(config.get("pre_tokenizer"), "Metaspace")
            or mentions(config.get("normalizer"), META) or bool(model.get("byte_fallback")))


def cuts(config: dict, tokenizer_json: str) -> CutRule:
    """The family's cuts, from its kernel's own analysis of the tokenizer (which ASCII neighbours of a
    space the normalizer keeps as they are, and whether every part gets a `▁`): for a Unigram model
    without building its tables, for a BPE from the tables the encoder uses (cached by the JSON text)."""
    if sentencepiece_support(config):
        return NO_CUTS  # not analysed by the kernel: whole documents, exact on any backend
    found = sentencepiece_cut_chars(tokenizer_json, config)
    if found is None:
        return NO_CUTS
    mode, left, right = found
    return CutRule(" ", after_visible=True, drop=mode == "drop", left=left, right=right)


SENTENCEPIECE = Family(FAMILY, claims, sentencepiece_support, SentencePieceFastTokenizer, cuts, marker_rule(META))
