"""Cuts proven from the tokenizer itself (issue 33): on the tokenizers no fast family covers, the
job's ids are the real tokenizer's `encode(whole cleaned document)` however the document arrives in
pieces; where nothing is proven the document is encoded whole, a large text input is not split into
byte ranges, and a document past the carry bound is skipped with the reason."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, trainers

from pipeline.beam.reading import reader as streams
from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import FORMAT_TEXT, WorkUnit, expand_inputs, split_large_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.beam.writing.arrow_io import read_part
from pipeline.tokenizer import encode
from pipeline.tokenizer.derived_cuts import cut_rule_and_reason, no_cut_reason
from pipeline.tokenizer.encode import DocumentEncoder
from pipeline.tokenizer.fast import choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas.shard import id_dtype_for_vocab
from tests.conftest import BOOKS, TOKENIZER_DIR, run_preprocess
from tests.tokenizer.test_bytelevel import tokenizer_json

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


@functools.lru_cache(maxsize=1)
def _book() -> str:
    text = sorted(BOOKS.glob("*.txt"))[1].read_text(encoding="utf-8", errors="replace")
    return text[len(text) // 2: len(text) // 2 + 30_000]


def _bytelevel_without_regex() -> str:
    """GPT-2-style BPE whose ByteLevel runs without its regex: merges cross spaces (`theĠ`)."""
    config = json.loads(tokenizer_json("modernbert"))
    config["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                               "use_regex": False}
    config["added_tokens"] = []  # modernbert's own would keep their ids beside the trained specials'
    real = Tokenizer.from_str(json.dumps(config))
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False)
    real.train_from_iterator([_book()[i: i + 2000] for i in range(0, 30_000, 2000)], trainer)
    return real.to_str()


def _bpe_without_pre_tokenizer() -> str:
    """A BPE with no pre-tokenizer trained on lines: its merges cross spaces, never a newline."""
    real = Tokenizer(models.BPE(unk_token="[UNK]"))
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS, initial_alphabet=["\n"],
                                  show_progress=False)
    real.train_from_iterator(_book().splitlines(), trainer)
    return real.to_str()


def _bert_with_new_york() -> str:
    real = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    real.add_tokens(["new york"])
    return real.to_str()


CASES = {"bytelevel_no_regex": _bytelevel_without_regex, "bpe_no_pre_tokenizer": _bpe_without_pre_tokenizer,
         "bert_new_york": _bert_with_new_york}


def _text() -> str:
    """The book with the added token's string (spelt as the normalizer folds it) and long lines."""
    book = _book()
    return (book[:10_000] + " New York, new  york and NEW\nYORK. " + book[10_000:].replace("\n\n", "\n")
            + " new york\n")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("packing", ["doc", "sentences"])
def test_the_job_gives_the_real_tokenizers_ids_of_the_whole_cleaned_document(tmp_path, monkeypatch, name, packing):
    """Fed in pieces of 1 KiB, the whole document's ids come out on the hf backend (which `auto` picks
    where no family covers the tokenizer; BERT with an added token is covered, its family's cuts less
    the added token's space): a cut where the tokenizer does not cut gives other ids (12,873 tokens, not 12,871)."""
    monkeypatch.setattr(streams, "ReadSizes", functools.partial(streams.ReadSizes, piece_bytes=1024))
    monkeypatch.setattr(streams, "CACHE_CHARS", 0)
    raw = CASES[name]()
    assert choose_backend("auto", raw)[0] == ("fast" if name == "bert_new_york" else "hf")
    spec = TokenizerSpec.from_json(raw)
    path = tmp_path / "book.txt"
    path.write_text(_text(), encoding="utf-8")
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="t",
                              validation_fraction=0.0, packing=packing, max_seq_length=64, min_tokens=1)
    layout, dtype = spec.layout(64, 1), id_dtype_for_vocab(spec.vocab_size)
    unit = expand_inputs([str(path)])[0]
    result = process_unit(unit, UnitContext(layout, dtype, config, str(tmp_path / "work"), build_tokenizer(spec)))
    reader = UnitReader(unit, config.text_column, config.keep_boilerplate)
    reader.scan()
    (_, pieces), = list(reader.documents())
    cleaned = "".join(pieces)
    reference = Tokenizer.from_str(raw)  # the real tokenizer as its file says, special strings as text
    reference.encode_special_tokens = True
    expected = np.asarray(reference.encode(cleaned, add_special_tokens=False).ids, dtype=np.int32)
    assert result.counts[m.TOKENS] == expected.shape[0] > 5000
    if packing == "doc":
        rows = read_part(result.parts[m.SPLITS[0]][0], 64)
        got = np.concatenate([row[1: length - 1] for row, length in zip(rows.ids, rows.lengths)])
        np.testing.assert_array_equal(got, expected)


def test_the_rules_are_those_proven():
    assert cut_rule_and_reason(json.loads(_bert_with_new_york()))[0].before == ""  # "new york" holds a space
    rule, how = cut_rule_and_reason(json.loads(_bpe_without_pre_tokenizer()))
    assert "\n" in rule.before and " " not in rule.before and "vocabulary" in how  # no merge holds a newline
    config = json.loads(_bpe_without_pre_tokenizer())
    config["model"]["ignore_merges"] = True  # a part that is a vocabulary entry would skip the merges
    assert cut_rule_and_reason(config)[0].before == ""
    assert " " not in cut_rule_and_reason(json.loads(_bytelevel_without_regex()))[0].before
    assert cut_rule_and_reason(json.loads(Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json")).to_str())
                               )[0].before == " \t\n\r"


def test_the_reason_for_no_cut_names_what_removed_the_cuts():
    """The job's log line says why no cut is proven: the added token holding the space, or the family
    and the pre-tokenizer that cut nowhere (it said "its fast family's pre-tokenizer" for both)."""
    rule, why = cut_rule_and_reason(json.loads(_bert_with_new_york()))
    assert rule.before == "" and "'new york'" in why and "WordPiece" in why
    config = json.loads(tokenizer_json("xlmr_unigram"))
    config["pre_tokenizer"]["split"] = False  # what transformers' converter wrote: the whole text one piece
    rule, why = cut_rule_and_reason(config)
    assert rule.before == "" and "SentencePiece" in why and "Metaspace" in why
    assert no_cut_reason(json.dumps(config)) == why


def test_without_a_proven_cut_text_inputs_are_not_split_into_ranges():
    raw = _bert_with_new_york()
    assert no_cut_reason(raw) is not None
    unit = WorkUnit(source="/x/big.txt", format=FORMAT_TEXT, size=10_000_000)
    assert split_large_inputs([unit], 1 << 20, split_text=False)[0].split_bytes == 0
    assert split_large_inputs([unit], 1 << 20)[0].split_bytes == 1 << 20


def test_a_document_past_the_carry_bound_is_skipped_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(encode, "MAX_CARRY_CHARS", 4000)
    monkeypatch.setattr(streams, "ReadSizes", functools.partial(streams.ReadSizes, piece_bytes=1024))
    spec = TokenizerSpec.from_json(_bert_with_new_york())
    encoder = DocumentEncoder(build_tokenizer(spec))
    with pytest.raises(encode.DocumentTooLong, match="no cut is proven"):
        for _ in range(5):
            encoder.feed("word " * 200)
    path = tmp_path / "book.txt"
    path.write_text(_book()[:10_000], encoding="utf-8")
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="t",
                              validation_fraction=0.0, max_seq_length=64, min_tokens=1)
    result = process_unit(expand_inputs([str(path)])[0],
                          UnitContext.from_spec(spec, config, str(tmp_path / "work"), build_tokenizer(spec)))
    assert result.skip_reason is not None and "4,000 characters" in result.skip_reason
    assert result.counts[m.TOKENS] == 0 and not result.parts


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_beam_job_counts_the_tokens_of_the_whole_cleaned_document(tmp_path, caplog, name):
    """The job through Beam (`auto` picks hf), and the one log line where no cut is proven."""
    raw = CASES[name]()
    tokenizer_path = tmp_path / "tokenizer.json"
    tokenizer_path.write_text(raw, encoding="utf-8")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "book.txt").write_text(_text(), encoding="utf-8")
    out = tmp_path / "out"
    with caplog.at_level("INFO"):
        run_preprocess([folder], out, "--max_seq_length", "64", "--min_tokens", "1", "--split_bytes", "4096",
                       tokenizer=tokenizer_path)
    unit = expand_inputs([str(folder / "book.txt")])[0]
    reader = UnitReader(unit, "text", False)
    reader.scan()
    (_, pieces), = list(reader.documents())
    reference = Tokenizer.from_str(raw)
    reference.encode_special_tokens = True
    expected = len(reference.encode("".join(pieces), add_special_tokens=False).ids)
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    assert manifest[m.KEY_COUNTS][m.TOKENS] == expected
    whole = [r.getMessage() for r in caplog.records if "no place where its text may be cut" in r.getMessage()]
    assert len(whole) == (1 if no_cut_reason(raw) else 0), whole
