"""The WordPiece family (BERT and its kin) as the registry lists it."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.tokenizer.cut_rule import WHITESPACE_CUTS, CutRule
from pipeline.tokenizer.family import Family
from pipeline.tokenizer.wordpiece.fast import FAMILY, WordPieceFastTokenizer, wordpiece_support


def claims(config: dict) -> bool:
    """Whether a tokenizer belongs to this family (a WordPiece model)."""
    return (config.get("model") or {}).get("type") == "WordPiece"


def cuts(config: dict, tokenizer_json: str) -> CutRule:
    """BertPreTokenizer cuts at any ASCII whitespace."""
    return WHITESPACE_CUTS


def continues_word(config: dict) -> Callable[[str], bool]:
    """A token continues a word when it starts with the model's subword prefix (`##`)."""
    prefix = (config.get("model") or {}).get("continuing_subword_prefix") or "##"
    return lambda token: token.startswith(prefix)


WORDPIECE = Family(FAMILY, claims, wordpiece_support, WordPieceFastTokenizer, cuts, continues_word)
