"""Issue 33's "done when", for every shipped test tokenizer (each file under tests/data/tokenizers/,
found by listing it, and bert-base-uncased): the job's rows hold the real tokenizer's
`encode(whole cleaned document)` on BOTH backends, with special-token strings in the text.

The reference is the tokenizer file itself (`tokenizers`, `encode_special_tokens=True`: a special
token's string in the text is text), never the other backend and never the tokenizer the job builds
(`content_tokenizer_json`): fast and hf share the cut rules, so comparing them with each other
cannot see a wrong cut (issue 33). One documented difference (docs/exactness.md, README): a Unigram
vocabulary holds its special pieces (`<s>`, `</s>`, `<pad>`, `<mask>`, `<unk>`) and `tokenizers`'
lattice picks them from the text, where SentencePiece never produces a control symbol from text and
the job never writes a special id from the text. For those the reference is the file with each
special piece renamed to a string no text holds (scores kept, so the lattice and its unknown-piece
score are otherwise the file's): made here, independently of how the job removes them.

The document arrives in pieces of 1 KiB (the reader's cache off), so the encoder cuts and holds back
text hundreds of times; it holds a book excerpt, the hostile text and every special-token string
alone, glued to words and doubled. T5 has no masked-LM special tokens (the job refuses it): it runs
with them added as ModernBERT added them to OLMo's tokenizer (`benchmarks.real_tokenizers`)."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from benchmarks.real_tokenizers import with_mlm_specials
from pipeline.beam.reading import reader as streams
from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.beam.writing.arrow_io import read_part
from pipeline.tokenizer.fast import FastTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerError, TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas.shard import id_dtype_for_vocab
from tests.conftest import EXCERPTS, TOKENIZER_DIR
from tests.tokenizer.test_bytelevel import TOKENIZERS
from tests.tokenizer.test_fast import HOSTILE
from tests.tokenizer.test_special_strings import _special_text

NAMES = ("bert", *sorted(p.stem if p.suffix == ".json" else p.name for p in TOKENIZERS.iterdir()
                         if p.suffix == ".json" or (p / "tokenizer.json").is_file()))
SEQ = 64
NO_TEXT_HOLDS = "\x00\x00"  # the reader never lets a NUL through (and the test checks the document)


def _raw(name: str) -> str:
    if name == "bert":
        return (TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8")
    path = TOKENIZERS / f"{name}.json"
    raw = (path if path.is_file() else TOKENIZERS / name / "tokenizer.json").read_text(encoding="utf-8")
    try:
        TokenizerSpec.from_json(raw)
    except TokenizerError:  # no masked-LM specials (T5): add them as ModernBERT did
        raw = with_mlm_specials(raw)
    return raw


def _reference(raw: str, spec: TokenizerSpec) -> Tokenizer:
    """The tokenizer file's own encode; for a Unigram, its special pieces renamed (module docstring)."""
    config = json.loads(raw)
    model = config["model"]
    if model["type"] == "Unigram":
        for token_id in spec.special_ids:
            if 0 <= token_id < len(model["vocab"]):
                model["vocab"][token_id][0] = NO_TEXT_HOLDS + model["vocab"][token_id][0]
        # special added tokens are never matched with encode_special_tokens; dropped, so that the
        # renamed pieces give no added token a new id
        config["added_tokens"] = [t for t in config["added_tokens"] if not t["special"]]
    real = Tokenizer.from_str(json.dumps(config))
    real.encode_special_tokens = True
    for token in config["added_tokens"]:
        assert real.token_to_id(token["content"]) == token["id"], token
    return real


@functools.lru_cache(maxsize=1)
def _document_text() -> str:
    book = (EXCERPTS / "classics__great_gatsby.txt").read_text(encoding="utf-8")
    return book[:6000] + "\n\n" + HOSTILE[:5000].replace("\x00", "") + "\n\n" + book[6000:]


def job_ids(tmp_path, monkeypatch, raw: str, spec: TokenizerSpec, text: str, hf: Tokenizer | None = None,
            fast: FastTokenizer | None = None) -> tuple[str, dict[str, np.ndarray]]:
    """(the cleaned document, {backend: the content ids of its rows}): `text` as one input read in
    pieces of 1 KiB, through the job's unit of work (`process_unit`: reading, cleaning, the document
    encoder, rows of SEQ) on the hf backend and on the fast one (`hf`: the tokenizer `build_tokenizer`
    makes, `fast`: the FastTokenizer over it, where the caller has them built)."""
    monkeypatch.setattr(streams, "ReadSizes", functools.partial(streams.ReadSizes, piece_bytes=1024))
    monkeypatch.setattr(streams, "CACHE_CHARS", 0)
    path = tmp_path / "book.txt"
    path.write_text(text, encoding="utf-8")
    unit = expand_inputs([str(path)])[0]
    reader = UnitReader(unit, "text", False)
    assert reader.scan().skip_reason is None
    (_, pieces), = list(reader.documents())
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="t",
                              validation_fraction=0.0, max_seq_length=SEQ, min_tokens=1, max_unk_fraction=1.0)
    layout, dtype = spec.layout(SEQ, 1), id_dtype_for_vocab(spec.vocab_size)
    hf = hf or build_tokenizer(spec)
    got = {}
    for backend, tokenizer in (("hf", hf), ("fast", fast or FastTokenizer(hf, raw))):
        result = process_unit(unit, UnitContext(layout, dtype, config, str(tmp_path / backend), tokenizer))
        assert result.skip_reason is None, (backend, result.skip_reason)
        rows = read_part(result.parts[m.SPLITS[0]][0], SEQ)
        got[backend] = np.concatenate([row[1: length - 1] for row, length in zip(rows.ids, rows.lengths)]
                                      ).astype(np.int64)
        assert result.counts[m.TOKENS] == got[backend].shape[0], backend
    return "".join(pieces), got


def assert_same_ids(got: dict[str, np.ndarray], expected: np.ndarray) -> None:
    for backend, ids in got.items():
        first = next((i for i, (a, b) in enumerate(zip(ids, expected)) if a != b), None)
        assert first is None and ids.shape == expected.shape, (backend, first, ids.shape, expected.shape)


@pytest.mark.parametrize("name", NAMES)
def test_the_job_writes_the_real_tokenizers_ids_of_the_whole_document_on_both_backends(tmp_path, monkeypatch, name):
    raw = _raw(name)
    spec = TokenizerSpec.from_json(raw)
    assert choose_backend("auto", raw) == ("fast", [])  # every shipped one runs fast (else: say why here)
    specials = _special_text(json.loads(raw))
    document, got = job_ids(tmp_path, monkeypatch, raw, spec, specials + _document_text() + specials)
    assert NO_TEXT_HOLDS not in document and "[MASK]" in document and "<s>" in document
    expected = np.asarray(_reference(raw, spec).encode(document, add_special_tokens=False).ids, dtype=np.int64)
    assert expected.shape[0] > 3000
    assert not set(expected.tolist()) & (set(spec.special_ids) - {spec.unk_id})
    assert_same_ids(got, expected)
