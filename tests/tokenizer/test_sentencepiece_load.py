"""A worker's SentencePiece load builds the real tokenizer once: the fast path's fallback chunks go to
the job's own tokenizer (`spec.build_tokenizer`: the content JSON, special-token strings as text)
instead of a second `Tokenizer.from_str` (~1-3 s a worker at J2's 262k pieces), and never to one built
from another JSON (the raw file's special pieces would come back from the text)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.tokenizer.content import content_tokenizer_json, special_ids_of
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.sentencepiece.fast import SentencePieceFastTokenizer
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES, TokenizerSpec, build_tokenizer

TOKENIZERS = Path(__file__).resolve().parent.parent / "data" / "tokenizers"
# fallback chunks (a combining mark alone, a lone surrogate-free format character, Hangul jamo) next to
# special-token strings and ordinary words
TEXT = "The <s> cat </s> sat\u0301 on \u200d<mask> the \u1100\u1161 mat <pad>, e\u0301t\u00e9 \u0300<unk>."


def _raw(name: str) -> str:
    return (TOKENIZERS / name / "tokenizer.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["xlmr_unigram", "llama_bpe"])
def test_the_jobs_tokenizer_serves_the_fallback_chunks(name):
    spec = TokenizerSpec.from_json(_raw(name))
    job = build_tokenizer(spec)
    fast = FastTokenizer(job, spec.json)
    assert fast._impl.tokenizer is job  # no second Tokenizer.from_str
    expected = job.encode(TEXT, add_special_tokens=False).ids
    assert fast.encode(TEXT).tolist() == expected
    assert not set(expected) & (set(spec.special_ids) - {spec.unk_id})  # unknown characters give <unk>


def test_a_tokenizer_of_another_json_is_not_used():
    """The raw xlmr file's tokenizer (its `<s>`, `</s>`, `<mask>` pieces in the lattice), even encoding
    special strings as text, given with the content JSON (those pieces emptied): a copy of the content
    JSON serves the fallback chunks, and no special id comes from the text."""
    raw = _raw("xlmr_unigram")
    content = content_tokenizer_json(raw, special_ids_of(json.loads(raw), SPECIAL_CANDIDATES))
    assert content != raw
    other = Tokenizer.from_str(raw)
    other.encode_special_tokens = True
    fast = SentencePieceFastTokenizer(other, content)
    assert fast.tokenizer is not other
    real = Tokenizer.from_str(content)
    real.encode_special_tokens = True
    assert fast.encode(TEXT).tolist() == real.encode(TEXT, add_special_tokens=False).ids
    special = {t["id"] for t in json.loads(raw)["added_tokens"] if t["special"] and t["content"] != "<unk>"}
    assert not set(fast.encode(TEXT).tolist()) & special


def test_a_tokenizer_matching_special_strings_is_left_as_it_is():
    raw = _raw("xlmr_unigram")
    given = Tokenizer.from_str(raw)
    fast = SentencePieceFastTokenizer(given, raw)
    assert fast.tokenizer is not given and not given.encode_special_tokens  # the caller's object unchanged
    ids = fast.encode(TEXT)
    assert ids.dtype == np.int32
    assert ids.tolist() == fast.tokenizer.encode(TEXT, add_special_tokens=False).ids
