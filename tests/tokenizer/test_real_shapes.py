"""Shapes of real public tokenizers (issue 33): DeepSeek's vocabulary holds the token `Regex` (which
was taken for a pattern and refused), and its empty `Sequence` normalizer is a no-op the byte-level
fast path accepts, with the real tokenizer's ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.tokenizer.fast import FastTokenizer, fast_support
from pipeline.tokenizer.spec import TokenizerError, TokenizerSpec, check_tokenizer_json
from tests.tokenizer.test_bytelevel import tokenizer_json
from tests.tokenizer.test_fast import HOSTILE

CATASTROPHIC = r"(\w+\s?)*$"


def _roberta() -> dict:
    return json.loads(tokenizer_json("roberta"))


def test_a_vocabulary_token_named_regex_is_a_token():
    config = _roberta()
    config["model"]["vocab"]["Regex"] = max(config["model"]["vocab"].values()) + 1
    config["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                                "special_tokens": {"Regex": {"id": "Regex", "ids": [5], "tokens": ["Regex"]}}}
    raw = json.dumps(config)
    check_tokenizer_json(raw)
    assert TokenizerSpec.from_json(raw).vocab_size == config["model"]["vocab"]["Regex"] + 1


@pytest.mark.parametrize("place", ["normalizer", "pre_tokenizer", "decoder"])
def test_a_backtracking_regex_is_still_refused_where_patterns_live(place):
    config = _roberta()
    replace = {"type": "Replace", "pattern": {"Regex": CATASTROPHIC}, "content": " "}
    split = {"type": "Split", "pattern": {"Regex": CATASTROPHIC}, "behavior": "Isolated", "invert": False}
    step = split if place == "pre_tokenizer" else replace
    config[place] = {"type": "Sequence", ("pretokenizers" if place == "pre_tokenizer" else
                                          "decoders" if place == "decoder" else "normalizers"): [step]}
    with pytest.raises(TokenizerError, match=f"tokenizer {place}.*pattern"):
        check_tokenizer_json(json.dumps(config))


def test_an_empty_sequence_normalizer_runs_fast_with_the_real_ids():
    config = _roberta()
    config["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": []}]}
    raw = json.dumps(config)
    problems = fast_support(config)
    assert problems == []
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    text = HOSTILE[:4000]
    np.testing.assert_array_equal(FastTokenizer(real, raw).encode(text), real.encode(text, add_special_tokens=False).ids)
    config["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Lowercase"}]}
    assert fast_support(config)  # a Sequence that does something is still refused
