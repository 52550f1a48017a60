"""Reading's stages ask one table of formats (`reading.formats.registry`): a format added to it is
listed, spread over workers and read with no other change. The context every unit of a job is
processed with is one picklable object, shipped without its tokenizer. The reading package's
docstring names each of its stages."""

from __future__ import annotations

import gzip
import pickle
import pkgutil

import pytest

from pipeline.beam import reading
from pipeline.beam.reading.formats import registry
from pipeline.beam.reading.formats.registry import SPREAD_LINE_RANGES, InputFormat, format_of_path, input_format
from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import expand_inputs, split_large_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.kernels.text.text_stream import RawTextStats
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m

SKIP_NO_TAB = "line has no tab"


def _read_tsv(source, column, skip, scan):
    """A records format of this test only: `id<TAB>text` lines, the text column second."""
    for piece in source.decoded_lines(RawTextStats(), on_long_line=lambda length: skip("too long")):
        for line in piece.split("\n"):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                skip(SKIP_NO_TAB)
                continue
            yield fields[1]


TSV = InputFormat("tsv", (".tsv",), records=True, spread=SPREAD_LINE_RANGES, read=_read_tsv)


@pytest.fixture
def with_tsv(monkeypatch):
    monkeypatch.setitem(registry.FORMATS, TSV.name, TSV)


def test_formats_by_name_as_every_listing_found_them():
    names = {"a.txt": "text", "b.TXT.gz": "text", "c": "text", "d.jsonl": "jsonl", "e.ndjson.zst": "jsonl",
             "f.json.bz2": "jsonl", "g.parquet": "parquet", "h.parquet.gz": "parquet", "i.csv": "text",
             "j.jsonl.txt": "text"}
    assert {name: format_of_path(name).name for name in names} == names
    assert not input_format("hf_dataset").from_file and input_format("text").records is False
    with pytest.raises(ValueError, match="unknown input format 'texts'"):
        input_format("texts")


def test_a_format_added_to_the_table_is_listed_spread_and_read(tmp_path, with_tsv, spec):
    lines = [f"{i}\trecord {i} tells of tea, the river and the long road home" for i in range(300)]
    lines.insert(7, "a line without a tab")
    path = tmp_path / "rows.tsv"
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "small.tsv.gz").write_bytes(gzip.compress(b"0\tone compressed record\n", mtime=0))
    units = expand_inputs([str(tmp_path)])
    assert [(u.source.rsplit("/", 1)[1], u.format) for u in units] == [("rows.tsv", "tsv"), ("small.tsv.gz", "tsv")]

    ranges = split_large_inputs(units, 4096)  # the format spreads as line ranges, as .jsonl does
    assert len(ranges) > 3 and all(u.format == "tsv" and u.path == str(path) for u in ranges[:-1])
    texts, skipped = [], {}
    for unit in ranges:
        reader = UnitReader(unit, "text", keep_boilerplate=True)
        scan = reader.scan()
        assert scan.skip_reason is None, (unit.source, scan.skip_reason)
        texts += [text for _, pieces in reader.documents() for text in pieces]
        for reason, n in scan.records_skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    assert texts == [line.split("\t")[1] for line in lines if "\t" in line] + ["one compressed record"]
    assert skipped == {SKIP_NO_TAB: 1}

    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.0, min_tokens=4)
    context = UnitContext.from_spec(spec, config, str(tmp_path / "temp"), FastTokenizer(build_tokenizer(spec),
                                                                                       spec.json))
    results = [process_unit(unit, context) for unit in ranges]
    assert sum(r.counts[m.FILES_READ] for r in results) == 2  # a file counts once, with its first range
    assert sum(r.counts[m.DOCUMENTS] for r in results) == 301 and sum(r.counts[m.ROWS] for r in results) > 0


def test_the_unit_context_travels_without_a_tokenizer(spec):
    config = PreprocessConfig(inputs=("x",), output="out", tokenizer="bert", max_seq_length=64, min_tokens=4)
    shipped = UnitContext.from_spec(spec, config, "out/temp")
    assert pickle.loads(pickle.dumps(shipped)) == shipped
    assert (shipped.layout.seq_len, shipped.layout.min_tokens, shipped.id_dtype.name) == (64, 4, "int16")
    with pytest.raises(RuntimeError, match="with_tokenizer"):
        shipped.encoder_tokenizer  # noqa: B018 - the property raises
    tokenizer = build_tokenizer(spec)
    worker = shipped.with_tokenizer(tokenizer)
    assert worker.encoder_tokenizer is tokenizer and shipped.tokenizer is None
    assert worker.layout is shipped.layout and worker.config is shipped.config


def test_the_reading_package_docstring_names_each_of_its_stages():
    modules = {info.name for info in pkgutil.iter_modules(reading.__path__)}
    formats = {info.name for info in pkgutil.iter_modules(reading.formats.__path__)}
    assert {"listing", "work_units", "listed_inputs", "reader", "compression", "byte_ranges", "formats"} <= modules
    doc = reading.__doc__
    missing = [name for name in sorted(modules) if f"`{name}" not in doc]
    assert not missing, missing
    assert "formats.registry" in doc and formats >= {"registry", "text", "jsonl", "parquet", "hf", "source"}
