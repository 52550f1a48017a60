"""A built tokenizer's cut rule and special-id guard come from one parse of the text it was built
from (facts.py, issue 33): no `Tokenizer.to_str()`, no second parse a worker, and the same facts as
the old derivation from `to_str()` on every test tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.tokenizer import parsed as parsed_module
from pipeline.tokenizer.content import SpecialGuard, special_ids_of
from pipeline.tokenizer.derived_cuts import cut_rule
from pipeline.tokenizer.encode import DocumentEncoder, cuts_of, guard_of
from pipeline.tokenizer.facts import TokenizerFacts
from pipeline.tokenizer.fast import FastTokenizer, fast_support
from pipeline.tokenizer.parsed import recorded_json, release_parses
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES, TokenizerError, TokenizerSpec, build_tokenizer
from tests.tokenizer.test_special_strings import NAMES, _raw

TEXT = "The [SEP] end. <s>a</s> <mask>, (\u00e9t\u00e9) \u4e2d\u6587 12345 don't\n\nNext one.  " * 4


def _spec(name: str) -> TokenizerSpec:
    try:
        return TokenizerSpec.from_json(_raw(name))
    except TokenizerError as error:  # a tokenizer the job refuses (no masked-LM specials)
        pytest.skip(f"{name}: {error}")


def _special_table(guard: SpecialGuard) -> np.ndarray:
    return np.flatnonzero(guard._table)


@pytest.mark.parametrize("name", NAMES)
def test_facts_from_the_recorded_text_equal_those_from_to_str(name):
    """The oracle is the old derivation: parse `to_str()` of the built tokenizer."""
    spec = _spec(name)
    tokenizer = build_tokenizer(spec)
    assert recorded_json(tokenizer) is not None
    facts = TokenizerFacts.of(tokenizer)
    text = tokenizer.to_str()
    config = json.loads(text)
    model = config.get("model") or {}
    unk = model.get("unk_id") if model.get("type") == "Unigram" else tokenizer.token_to_id(
        model.get("unk_token") or "[UNK]")
    oracle = SpecialGuard(special_ids_of(config, SPECIAL_CANDIDATES), unk, {})
    assert facts.cuts == cut_rule(config, text)
    ours, theirs = set(_special_table(facts.guard)), set(_special_table(oracle))
    assert theirs <= ours  # every id the old guard refused, and the file's own special ids
    assert ours - theirs <= set(spec.special_ids)
    assert TokenizerFacts.of(tokenizer) is facts  # once per tokenizer object
    # a tokenizer with no recorded text (built elsewhere) falls back to to_str, same facts
    other = Tokenizer.from_str(text)
    assert recorded_json(other) is None
    assert TokenizerFacts.of(other).cuts == facts.cuts


class _CountedParses:
    def __init__(self, monkeypatch) -> None:
        self.texts: list[str] = []
        real = json.loads

        def loads(s, *args, **kwargs):
            if isinstance(s, str) and len(s) > 10_000:
                self.texts.append(s)
            return real(s, *args, **kwargs)

        monkeypatch.setattr(parsed_module.json, "loads", loads)


@pytest.mark.parametrize("name", ["bert", "roberta", "xlmr_unigram"])
def test_a_hf_worker_parses_its_tokenizer_once_and_never_through_to_str(name, monkeypatch):
    spec = _spec(name)
    tokenizer = build_tokenizer(spec)  # what a worker does: build, then encode documents
    release_parses()
    source = recorded_json(tokenizer)
    counted = _CountedParses(monkeypatch)
    for _ in range(2):
        encoder = DocumentEncoder(tokenizer, sentences=True)
        encoder.feed(TEXT)
        encoder.finish()
    guard_of(tokenizer)
    cuts_of(tokenizer)
    assert len(counted.texts) == 1
    assert counted.texts[0] is source  # the text it was built from, not a to_str() copy


@pytest.mark.parametrize("name", ["bert", "roberta", "xlmr_unigram"])
def test_a_fast_worker_parses_nothing_once_its_encoder_is_built(name, monkeypatch):
    spec = _spec(name)
    if fast_support(json.loads(spec.json)):
        pytest.skip(f"{name} is not covered by a fast family")
    fast = FastTokenizer(build_tokenizer(spec), spec.json)
    counted = _CountedParses(monkeypatch)
    encoder = DocumentEncoder(fast, sentences=True)
    encoder.feed(TEXT)
    encoder.finish()
    guard_of(fast)
    assert counted.texts == []
