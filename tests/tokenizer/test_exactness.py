"""The exactness contract: a document's ids are the real tokenizer's `encode(whole document)` whatever
the backend, the pieces it arrives in and the byte ranges it is split into; sentence lengths do not
depend on the pieces either. And the WordPiece gaps of issue 22, each with the input that showed it."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.beam.input_splits import scan_for_splits, stitch_splits, tokenize_split
from pipeline.beam.reading import reader as streams
from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import StageClock, UnitContext, process_unit
from pipeline.beam.writing.arrow_io import read_part
from pipeline.tokenizer.encode import DocumentEncoder, tokenize_sentences, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, fast_support
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas.shard import id_dtype_for_vocab
from tests.conftest import BOOKS
from tests.fuzz.runs import fuzz_runs
from tests.tokenizer.test_bytelevel import tokenizer_json
from tests.tokenizer.test_fast import HOSTILE


@functools.lru_cache(maxsize=1)
def _prose() -> str:
    """Hard-wrapped prose without blank lines (one long paragraph), then paragraphs, then traps."""
    book = sorted(BOOKS.glob("*.txt"))[0].read_text(encoding="utf-8", errors="replace")
    middle = len(book) // 2
    wrapped = book[middle: middle + 12_000].replace("\n\n", "\n")
    return wrapped + "\n\n" + book[middle + 12_000: middle + 20_000] + "\n\n" + HOSTILE[:3000] + " The end.\n"


def _tokenizers(name: str, bert_json: str) -> tuple[Tokenizer, FastTokenizer]:
    raw = bert_json if name == "bert" else tokenizer_json(name)
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    return real, FastTokenizer(real, raw)


@pytest.fixture(scope="module")
def pairs(spec):
    return {name: _tokenizers(name, spec.json) for name in CUT_FAMILIES}


# WordPiece, byte-level BPE (GPT-2 regex, prefix space, Llama-3 regex) and SentencePiece (Unigram behind
# Metaspace with a Precompiled normalizer: a cut drops its space; byte-fallback BPE behind Prepend+Replace)
CUT_FAMILIES = ("bert", "roberta", "gpt2", "llama3", "xlmr_unigram", "llama_bpe")


@pytest.mark.parametrize("run", fuzz_runs(4, 3))  # the fixed regression set, then a seeded random run
@pytest.mark.parametrize("name", CUT_FAMILIES)
def test_pieces_cut_anywhere_give_the_whole_documents_ids_and_sentences(pairs, name, run):
    @given(cuts=st.lists(st.integers(min_value=0, max_value=25_000), max_size=30), backend=st.sampled_from([0, 1]))
    def check(cuts, backend):
        _check_pieces(pairs, name, cuts, backend)

    run.run(check)


def _check_pieces(pairs, name, cuts, backend):
    text = _prose()
    real, fast = pairs[name]
    tokenizer = (real, fast)[backend]
    whole = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)
    ids, lengths = tokenize_sentences(tokenizer, text)
    np.testing.assert_array_equal(ids, whole)
    assert int(lengths.sum()) == whole.shape[0] and lengths.shape[0] > 100
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    for sentences in (False, True):
        encoder = DocumentEncoder(tokenizer, sentences)
        out = [encoder.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])] + [encoder.finish()]
        np.testing.assert_array_equal(np.concatenate([o[0] for o in out]), whole)
        if sentences:
            got = np.concatenate([o[1] for o in out])
            np.testing.assert_array_equal(got[got > 0], lengths)


@pytest.mark.parametrize("name", ["roberta", "llama3"])
def test_the_hf_backend_keeps_paragraph_breaks_and_the_first_words_space(name):
    """Paragraph pieces dropped the breaks: `Ċ` lost and `CHAPTER` without its `Ġ` on hf too."""
    real = Tokenizer.from_str(tokenizer_json(name))
    text = "The end.\n\nCHAPTER 2\n\n\n  Indented words.\n"
    np.testing.assert_array_equal(tokenize_text(real, text), real.encode(text, add_special_tokens=False).ids)


def test_hf_backend_keeps_u001c_after_a_blank_line(spec):
    """`iter_paragraphs` read U+001C..U+001F as whitespace (Python's `\\s`), the tokenizer does not."""
    config = json.loads(spec.json)
    config["normalizer"] = {"type": "NFC"}
    real = Tokenizer.from_str(json.dumps(config))
    text = "hello\n\n\x1cworld \x1d\n\n\x1e\x1f"
    np.testing.assert_array_equal(tokenize_text(real, text), real.encode(text, add_special_tokens=False).ids)


def _wordpiece_variant(spec: TokenizerSpec, change) -> tuple[Tokenizer, str]:
    config = json.loads(spec.json)
    change(config)
    raw = json.dumps(config)
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    return real, raw


@pytest.mark.parametrize("normalizers", [
    [{"type": "NFC"}, {"type": "Lowercase"}, {"type": "StripAccents"}],
    [{"type": "NFKC"}, {"type": "StripAccents"}],
    [{"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": False,
      "lowercase": True}, {"type": "NFC"}, {"type": "StripAccents"}],
])
def test_composing_before_strip_accents_is_not_taken_for_per_character(spec, normalizers):
    """"e\\u0301" composes to "\\u00e9", which StripAccents keeps; the mark alone is deleted."""
    real, raw = _wordpiece_variant(spec, lambda c: c.update(normalizer={"type": "Sequence",
                                                                        "normalizers": normalizers}))
    problems = fast_support(json.loads(raw))
    assert any("before StripAccents" in p for p in problems), problems


@pytest.mark.parametrize("prefix", ["", "\u2581"])
def test_any_continuing_subword_prefix_gives_the_real_ids(spec, prefix):
    def change(config: dict) -> None:
        model = config["model"]
        vocab = {}
        for token, token_id in model["vocab"].items():
            renamed = prefix + token[2:] if token.startswith("##") else token
            vocab.setdefault(renamed, token_id)
        model["vocab"], model["continuing_subword_prefix"] = vocab, prefix

    real, raw = _wordpiece_variant(spec, change)
    text = _prose()[:6000]
    np.testing.assert_array_equal(FastTokenizer(real, raw).encode(text), real.encode(text, add_special_tokens=False).ids)


def test_max_input_chars_per_word_zero_makes_every_word_unk(spec):
    real, raw = _wordpiece_variant(spec, lambda c: c["model"].update(max_input_chars_per_word=0))
    text = "hello world, a test."
    expected = real.encode(text, add_special_tokens=False).ids
    assert set(expected) == {spec.unk_id} and len(expected) == 6
    np.testing.assert_array_equal(FastTokenizer(real, raw).encode(text), expected)


@pytest.mark.parametrize("name, packing", [("bert", "sentences"), ("roberta", "sentences"), ("gpt2", "doc"),
                                           ("xlmr_unigram", "sentences")])
def test_byte_ranges_give_the_rows_of_the_unsplit_input(tmp_path, spec, monkeypatch, name, packing):
    """Hard-wrapped prose without blank lines in ranges of 16 KiB (pieces of 4 KiB): a range end is not
    a sentence end and no text is lost or doubled at a range junction (issue 23, point 4)."""
    monkeypatch.setattr(streams, "ReadSizes", functools.partial(streams.ReadSizes, piece_bytes=4096))
    monkeypatch.setattr(streams, "CACHE_CHARS", 0)
    raw = spec.json if name == "bert" else tokenizer_json(name)
    tokenizer = FastTokenizer(build_tokenizer(TokenizerSpec.from_json(raw)), raw)
    own_spec = TokenizerSpec.from_json(raw)
    path = tmp_path / "wrapped.txt"
    text = "\n".join(_prose().replace("\n\n", "\n") for _ in range(4)).replace("\x00", "").replace("\r", "")
    path.write_text(text, encoding="utf-8")
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="t",
                              validation_fraction=0.2, packing=packing, max_seq_length=64, min_tokens=1)
    layout = own_spec.layout(config.max_seq_length, config.min_tokens)
    dtype = id_dtype_for_vocab(own_spec.vocab_size)
    unit = expand_inputs([str(path)])[0]
    whole = process_unit(unit, UnitContext(layout, dtype, config, str(tmp_path / "whole"), tokenizer))
    context = UnitContext(layout, dtype, config, str(tmp_path / "split"), tokenizer)
    tasks = scan_for_splits(dataclasses.replace(unit, split_bytes=16384), context, StageClock())
    assert isinstance(tasks, list) and len(tasks) >= 4  # at least three junctions, on either corpus
    split = stitch_splits([tokenize_split(task, context) for task in tasks], context)
    assert split.counts == whole.counts and whole.counts[m.ROWS] > 100
    for part in m.SPLITS:
        a, b = (read_part(r.parts[part][0], config.max_seq_length) for r in (whole, split))
        assert a.ids.tobytes() == b.ids.tobytes() and a.lengths.tobytes() == b.lengths.tobytes()
    expected = np.asarray(tokenizer.tokenizer.encode(text, add_special_tokens=False).ids)
    assert whole.counts[m.TOKENS] == expected.shape[0]
