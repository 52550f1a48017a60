"""A trained tokenizer round-trips through the preprocess job and transformers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pipeline.consumers.outputs import load_manifest
from pipeline.kernels.cleaning import clean_bytes
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from tests.conftest import corpus_book, run_preprocess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind, cls_token", [("wordpiece", "[CLS]"), ("bpe", "<s>")])
def test_trained_tokenizer_round_trips(small_books, tmp_path, kind, cls_token, caplog):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from jobs.train_tokenizer import run

    out = tmp_path / "tok"
    with caplog.at_level("INFO", logger="maskbeam"):
        run(["--input", str(small_books), "--output", str(out), "--vocab_size", "3000", "--kind", kind])
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(out)))
    n_inputs = len(list(small_books.iterdir()))
    assert re.search(rf"trained an uncased {kind} tokenizer of {spec.vocab_size} ids \(asked 3000\) on {n_inputs} "
                     rf"inputs, [\d.]+ [KM]B of text, in \d+:\d\d", caplog.text), caplog.text
    assert f"saved to {out}" in caplog.text and f"--tokenizer {out}" in caplog.text
    assert 2000 < spec.vocab_size <= 3000
    assert spec.cls_id == spec.special_ids[spec.special_ids.index(spec.cls_id)]
    assert len(spec.continuation_ids) > 100  # word boundaries are known for whole-word masking
    hf = AutoTokenizer.from_pretrained(str(out))
    assert isinstance(hf, PreTrainedTokenizerFast) and hf.cls_token == cls_token
    text = clean_bytes((corpus_book("drama__doctor_faustus.txt")).read_bytes()).text[:20000]
    ours = tokenize_text(build_tokenizer(spec), text)
    if kind == "wordpiece":  # byte-level BPE marks spaces in the token, so paragraph pieces differ there
        np.testing.assert_array_equal(ours, hf(text, add_special_tokens=False)["input_ids"])
    assert hf(text)["input_ids"][0] == spec.cls_id
    data = tmp_path / "data"
    run_preprocess([small_books], data, "--whole_word_mask", "--max_seq_length", "128", tokenizer=out)
    manifest = load_manifest(str(data))
    assert manifest[m.KEY_TOKENIZER][m.KEY_VOCAB_SIZE] == spec.vocab_size
    assert manifest[m.KEY_COUNTS][m.ROWS] > 100
