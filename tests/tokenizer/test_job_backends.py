"""The whole job with a byte-level BPE tokenizer writes byte-identical shards on the fast and the hf
backend (sentence packing and span masking, word starts from `Ġ`: one job pair, CI time), and the
rows of every packing mode are byte-identical on both backends (masking is a function of the rows)."""

from __future__ import annotations

import hashlib
import json

import pytest

from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.beam.writing.arrow_io import read_part
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas.options import PACKING_MODES
from schemas.shard import id_dtype_for_vocab
from tests.conftest import BOOKS, run_preprocess
from tests.tokenizer.test_bytelevel import TOKENIZERS, tokenizer_json
from tests.tokenizer.test_fast import HOSTILE


def _hashes(out) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != m.MANIFEST_FILE}


def _inputs(folder):
    folder.mkdir()
    for path in sorted(BOOKS.glob("*.txt"))[:2]:
        text = path.read_text(encoding="utf-8", errors="replace")
        (folder / path.name).write_text(text[len(text) // 3: len(text) // 3 + 40_000], encoding="utf-8")
    (folder / "hostile.txt").write_text(HOSTILE.replace("\x00", "") * 3, encoding="utf-8")
    return folder


@pytest.mark.parametrize("packing", PACKING_MODES)
@pytest.mark.parametrize("name", ["roberta", "xlmr_unigram", "llama_bpe"])
def test_fast_and_hf_make_the_same_rows(tmp_path, packing, name):
    raw = tokenizer_json(name)
    spec = TokenizerSpec.from_json(raw)
    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="t",
                              validation_fraction=0.2, packing=packing, max_seq_length=128, min_tokens=8)
    layout, dtype = spec.layout(128, 8), id_dtype_for_vocab(spec.vocab_size)
    real = build_tokenizer(spec)
    for unit in expand_inputs([str(_inputs(tmp_path / "in"))]):
        rows = []
        for name, tokenizer in (("hf", real), ("fast", FastTokenizer(real, raw))):
            result = process_unit(unit, UnitContext(layout, dtype, config, str(tmp_path / name), tokenizer))
            rows.append({split: read_part(path, 128).ids.tobytes() + read_part(path, 128).lengths.tobytes()
                         for split, (path, _) in result.parts.items()})
        assert rows[0] == rows[1] and rows[0]


def test_fast_and_hf_write_the_same_shards(tmp_path):
    packing, masking = "sentences", "--span_mask"
    inputs = _inputs(tmp_path / "in")
    outputs = {}
    for backend in ("fast", "hf"):
        outputs[backend] = tmp_path / backend
        run_preprocess([inputs], outputs[backend], "--tokenizer_backend", backend, "--packing", packing, masking,
                       "--max_seq_length", "128", "--min_tokens", "8", tokenizer=TOKENIZERS / "roberta.json")
    manifest = json.loads((outputs["fast"] / m.MANIFEST_FILE).read_text())
    assert manifest[m.KEY_CONFIG]["tokenizer_backend"] == "fast"
    assert manifest[m.KEY_COUNTS][m.ROWS] > 50
    assert _hashes(outputs["fast"]) == _hashes(outputs["hf"])


def test_a_tokenizer_without_mlm_specials_is_refused_naming_every_missing_one():
    """T5-style: no [CLS]-like and no [MASK]-like token; the job says both, and what to do."""
    from pathlib import Path

    from pipeline.tokenizer.resolve import resolve_tokenizer_json
    from pipeline.tokenizer.spec import TokenizerError

    t5 = Path(__file__).resolve().parent.parent / "data" / "tokenizers" / "t5_unigram"
    with pytest.raises(TokenizerError, match=r"no cls token .* and no mask token .*add_special_tokens"):
        TokenizerSpec.from_json(resolve_tokenizer_json(str(t5)))
