"""What the encoder derives once per built tokenizer: where its text may be cut and which ids the
text must never give, both from one parse of the JSON it was built from.

Each used to run `Tokenizer.to_str()` and `json.loads` on the whole tokenizer (1.4 + 1.5 CPU-s a
worker for Qwen3.6 on `hf`); now `TokenizerFacts.of` reads the text the tokenizer was built from
(`parsed.built_from`, recorded by `spec.build_tokenizer`) and parses it once, or takes the parse a
caller already holds (`FastTokenizer` before it lets its parses go).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from tokenizers import Tokenizer

from pipeline.tokenizer.content import SpecialGuard, special_ids_of
from pipeline.tokenizer.cut_rule import CutRule
from pipeline.tokenizer.derived_cuts import cut_rule
from pipeline.tokenizer.parsed import parse_unkept, source_json
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES


@dataclass(frozen=True)
class TokenizerFacts:
    """A built tokenizer's cut rule (`derived_cuts.cut_rule`) and special-id guard (`content.SpecialGuard`)."""

    cuts: CutRule
    guard: SpecialGuard

    @classmethod
    def of(cls, tokenizer: Tokenizer, config: dict | None = None, tokenizer_json: str | None = None
           ) -> TokenizerFacts:
        """The facts of `tokenizer`, derived once per tokenizer object. `config` and `tokenizer_json`:
        the JSON it was built from, parsed and as text, where the caller holds them."""
        found = _FACTS.get(tokenizer)
        if found is None:
            text = source_json(tokenizer) if tokenizer_json is None else tokenizer_json
            config = parse_unkept(text) if config is None else config
            found = _FACTS[tokenizer] = cls(cut_rule(config, text), _guard(tokenizer, config))
        return found


# Per live tokenizer object: an entry goes when its tokenizer does, so neither keeps a tokenizer
# alive nor can a later tokenizer at the same address find it.
_FACTS: weakref.WeakKeyDictionary[Tokenizer, TokenizerFacts] = weakref.WeakKeyDictionary()


def _guard(tokenizer: Tokenizer, config: dict) -> SpecialGuard:
    model = config.get("model") or {}
    unk = model.get("unk_id") if model.get("type") == "Unigram" else tokenizer.token_to_id(
        model.get("unk_token") or "[UNK]")
    added = tokenizer.get_added_tokens_decoder()
    names = {i: t.content for i, t in added.items()}
    # The file's special ids and the built tokenizer's: a Unigram content tokenizer (content.py)
    # numbers its special added tokens past the vocabulary, where `to_str()` (read before) said.
    special = special_ids_of(config, SPECIAL_CANDIDATES) | {i for i, t in added.items() if t.special}
    return SpecialGuard(special, unk, names)
