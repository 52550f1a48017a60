"""AI21 J2's tokenizer (issue 33): the 262,144-piece byte-fallback Unigram `.model` of the
`ai21-tokenizer` wheel (Apache-2.0), converted by transformers' `SpmConverter` at test time
(`benchmarks.j2_tokenizer`; never committed), with masked-LM specials added as ModernBERT added them
to OLMo's tokenizer. The converter writes J2's user-defined pieces as an isolated `Split` of
literal characters (`,|\\(|\\)`), which the SentencePiece family's kernel takes: the fast backend
claims J2, and its ids are the real tokenizer's `encode(whole document)` on the book excerpts, the
hostile text and seeded strings of J2's traps."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.tokenizer.encode import MAX_PIECE_CHARS, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.conftest import EXCERPTS
from tests.tokenizer.test_fast import HOSTILE

pytestmark = pytest.mark.slow  # a 262k vocabulary: converting it, its spec and its tables take ~20 s of CPU


@pytest.fixture(scope="module")
def j2() -> tuple[str, TokenizerSpec]:
    pytest.importorskip("ai21_tokenizer", reason="the dev extra installs ai21-tokenizer")
    from benchmarks.j2_tokenizer import j2_mlm_json

    tokenizer_json = j2_mlm_json()
    return tokenizer_json, TokenizerSpec.from_json(tokenizer_json)


@functools.lru_cache(maxsize=1)
def _hf(spec: TokenizerSpec) -> Tokenizer:
    return build_tokenizer(spec)


@functools.lru_cache(maxsize=1)
def _fast(spec: TokenizerSpec) -> FastTokenizer:
    return FastTokenizer(_hf(spec), spec.json)


@functools.lru_cache(maxsize=1)
def _real(tokenizer_json: str) -> Tokenizer:
    real = Tokenizer.from_str(tokenizer_json)
    real.encode_special_tokens = True  # special-token strings in the text are text
    return real


def _texts() -> dict[str, str]:
    texts = {}
    for path in sorted(EXCERPTS.glob("*.txt")):
        try:
            texts[path.name] = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
    texts["hostile"] = HOSTILE
    traps = [",", "(", ")", "(x)", "a,b", ", ", " (", ") ", "\uff0c", "\uff08", "\uff09", "\ufe50", "\u3001", "1,000",
             "3.14", "2ND", "THU", "11TH", "<|newline|>", "<|endoftext|>", "[CLS]", "[MASK]", " ", "  ", "\n", "\t",
             "\u00a0", "\u3000", "e\u0301", "g\u0303", "\u0303\u0303", "\u6f22\u5b57", "\U0001F600", "\ufb01", "\u2581",
             "\x00", "the", "The", "don't", "--"]
    rng = random.Random(332)
    for i in range(200):
        texts[f"generated-{i}"] = "".join(rng.choice(traps) for _ in range(rng.randrange(1, 50)))
    texts["long line"] = "word, " * (MAX_PIECE_CHARS // 6 + 7) + "(1234)" * 2000
    return texts


def test_j2_runs_fast_with_the_real_ids_of_the_whole_document(j2):
    tokenizer_json, spec = j2
    config = json.loads(tokenizer_json)
    assert [p["type"] for p in config["pre_tokenizer"]["pretokenizers"]] == ["Split"]
    assert config["pre_tokenizer"]["pretokenizers"][0]["pattern"] == {"Regex": ",|\\(|\\)"}
    assert len(config["model"]["vocab"]) == 262_144 and config["model"]["byte_fallback"]
    assert choose_backend("auto", tokenizer_json) == ("fast", [])
    fast = _fast(spec)
    real = _real(tokenizer_json)
    bad = []
    texts = _texts()
    for name, text in texts.items():
        expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        got = np.asarray(tokenize_text(fast, text), dtype=np.int64)
        if not np.array_equal(got, expected):
            bad.append(f"{name}: {len(got)} ids, the real tokenizer {len(expected)}")
    assert bad == [] and len(texts) > 200


def test_j2_job_writes_the_real_ids_of_the_whole_document_on_both_backends(j2, tmp_path, monkeypatch):
    """The job's unit of work (reading in pieces of 1 KiB, cleaning, the document encoder, rows) on hf
    and on fast against the real tokenizer's `encode(whole cleaned document)`, special-token strings
    in the text (`test_job_backends_real_ids`; J2's vocabulary holds no special piece of the spec)."""
    from tests.tokenizer.test_job_backends_real_ids import assert_same_ids, job_ids
    from tests.tokenizer.test_special_strings import _special_text

    tokenizer_json, spec = j2
    real = _real(tokenizer_json)
    assert min(spec.special_ids) >= real.get_vocab_size(with_added_tokens=False)  # none in the lattice
    texts = _texts()
    specials = _special_text({"added_tokens": [{"content": t.content, "special": t.special}
                                               for t in real.get_added_tokens_decoder().values()]})
    text = "\n".join([specials, texts["classics__great_gatsby.txt"], HOSTILE[:6000],
                      *(texts[f"generated-{i}"] for i in range(40))])
    text = text.replace("\x00", "")  # a NUL makes an input binary (skipped): J2's traps hold one
    document, got = job_ids(tmp_path, monkeypatch, tokenizer_json, spec, text, _hf(spec), _fast(spec))
    expected = np.asarray(real.encode(document, add_special_tokens=False).ids, dtype=np.int64)
    assert expected.shape[0] > 3000 and not set(expected.tolist()) & (set(spec.special_ids) - {spec.unk_id})
    assert_same_ids(got, expected)
