"""Differential fuzzing of the streamed and split readers against whole-file oracles (issue 23,
"Prove it").

Hypothesis builds hostile inputs: text, .jsonl and parquet; uncompressed or gz/bz2/xz/zst in
members of random sizes; UTF-8, UTF-8 with BOM, UTF-16; LF, CRLF, lone CR; with and without blank
lines; Gutenberg markers (several books in one file); NUL, HTML, control and undecodable lines.
Each is read with random read, decompress-block, piece, line-bound and --split_bytes sizes (small,
so every boundary is hit) and must give exactly what the oracle gives for the whole file:

* text: `clean_bytes` of the whole decompressed file (its clean text, or its skip reason), also
  when re-read in the byte ranges the scan cut;
* .jsonl: a line-by-line reading of the whole decoded file (the records' clean texts in order,
  and the count of each record skip reason), also summed over the byte ranges of a split file;
* parquet: `clean_text` of each row.

A few examples go on to rows: the unsplit unit and its split ranges stitched give the same part
files for every --packing mode. Each test runs twice (`tests/fuzz/runs.py`): the fixed regression set
(MASKBEAM_FUZZ_EXAMPLES examples, default 60; benchmarks/fuzz_readers.py runs a long profile) and a
randomized run of a quarter as many, seeded by MASKBEAM_FUZZ_SEED or the clock (a failure names its seed).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from pipeline.beam.reading.byte_ranges import exact_blocks
from pipeline.beam.reading.formats.jsonl import (
    MAX_FIELDS_NAMED,
    SKIP_NOT_JSON,
    SKIP_NUL,
    long_line_reason,
    missing_field_reason,
)
from pipeline.beam.reading.reader import ReadSizes, UnitReader
from pipeline.beam.reading.work_units import WorkUnit, expand_inputs, split_large_inputs
from pipeline.kernels.text.cleaning import (
    SKIP_EMPTY,
    UTF8_BOM,
    UTF16_BOMS,
    NotText,
    clean_bytes,
    clean_text,
    decode_utf8,
    normalize_newlines,
)
from pipeline.kernels.text.text_stream import RawTextStats, clean_pieces, decoded_pieces
from tests.fuzz.runs import fuzz_runs

EXAMPLES = int(os.environ.get("MASKBEAM_FUZZ_EXAMPLES", "60"))
RUNS = fuzz_runs(EXAMPLES, EXAMPLES // 4)

COMPRESSORS = {"": None, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": lambda data: zstandard.ZstdCompressor().compress(data)}
PROSE = st.sampled_from(["The river ran past the mill.", "She poured the tea, slowly.", "Ünïcödé wörds ünd ß.",
                         "漢字の文", "a", "Mr. Smith went to Washington. He left.", "   indented line",
                         "word " * 12, "Tabs\tand\tspaces", "\ufeffzero-width start", "ends with a space "])
HOSTILE = st.sampled_from(["*** START OF THE PROJECT GUTENBERG EBOOK TEA ***",
                           "*** END OF THE PROJECT GUTENBERG EBOOK TEA ***", "<html><body>page</body></html>",
                           "ctrl \x01\x02 chars", "nul \x00 byte", "", "", "  "])


@st.composite
def text_lines(draw) -> list[str]:
    pool = st.one_of(PROSE, PROSE, HOSTILE)
    return draw(st.lists(pool, min_size=0, max_size=40))


def _encode(text: str, encoding: str, newline: str, junk: bool) -> bytes:
    text = text.replace("\n", newline)
    if encoding == "utf-16":
        return text.encode("utf-16")
    data = text.encode("utf-8")
    if junk:
        data = data.replace(b"river", b"ri\xffver\xc3")  # undecodable bytes
    return (UTF8_BOM if encoding == "utf-8-sig" else b"") + data


def _compress(data: bytes, suffix: str, cuts: list[int]) -> bytes:
    if not suffix:
        return data
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return b"".join(COMPRESSORS[suffix](data[a:b]) for a, b in zip(bounds, bounds[1:])) or COMPRESSORS[suffix](b"")


@st.composite
def sizes(draw) -> ReadSizes:
    return ReadSizes(read_bytes=draw(st.integers(1, 97)), compressed_block_bytes=draw(st.integers(1, 97)),
                     piece_bytes=draw(st.integers(8, 160)), max_line_bytes=draw(st.sampled_from([40, 64 << 20])))


def _read(unit: WorkUnit, column: str, keep: bool, read_sizes: ReadSizes, split_bytes: int = 0):
    reader = UnitReader(unit, column, keep, split_bytes=split_bytes, sizes=read_sizes)
    scan = reader.scan()
    if scan.skip_reason is not None:
        return reader, scan, None
    return reader, scan, ["".join(pieces) for _, pieces in reader.documents()]


def _whole_text_oracle(raw: bytes, keep: bool) -> tuple[str | None, str | None]:
    try:
        return clean_bytes(raw, keep).text, None
    except NotText as reason:
        return None, str(reason)


@pytest.mark.parametrize("run", RUNS)
def test_text_streamed_and_split_equal_the_whole_file(tmp_path_factory, run):
    @given(lines=text_lines(), encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]),
           newline=st.sampled_from(["\n", "\r\n", "\r"]), junk=st.booleans(),
           suffix=st.sampled_from(sorted(COMPRESSORS)), cuts=st.lists(st.integers(0, 4000), max_size=4),
           read_sizes=sizes(), keep=st.booleans(), split_bytes=st.integers(16, 600))
    def check(lines, encoding, newline, junk, suffix, cuts, read_sizes, keep, split_bytes):
        _check_text(tmp_path_factory, lines, encoding, newline, junk, suffix, cuts, read_sizes, keep, split_bytes)

    run.run(check)


def _check_text(tmp_path_factory, lines, encoding, newline, junk, suffix, cuts, read_sizes, keep, split_bytes):
    raw = _encode("\n".join(lines), encoding, newline, junk)
    path = tmp_path_factory.mktemp("text") / f"book.txt{suffix}"
    path.write_bytes(_compress(raw, suffix, cuts))
    want, want_reason = _whole_text_oracle(raw, keep)
    (unit,) = expand_inputs([str(path)])
    _, scan, texts = _read(unit, "text", keep, read_sizes)
    assert (scan.skip_reason, texts) == (want_reason, None if want is None else [want])
    if suffix or want is None:
        return
    reader, scan, _ = _read(unit, "text", keep, read_sizes, split_bytes=split_bytes)
    if not scan.splits:  # UTF-16: never split
        assert encoding == "utf-16"
        return
    assert scan.splits[0].start == 0 and scan.splits[-1].stop == len(raw)
    joined = "".join(
        "".join(clean_pieces(decoded_pieces(exact_blocks(str(path), r.start, r.stop, read_sizes.read_bytes),
                                            RawTextStats(), reader.piece_bytes, at_start=r.start == 0),
                             scan.strip, r.strip_state))
        for r in scan.splits)
    assert joined == want


def _jsonl_oracle(raw: bytes, column: str, max_line: int) -> tuple[list[str], Counter, str | None]:
    """The records of a whole .jsonl file, line by line: (texts, skip counts, file skip reason)."""
    if raw.startswith(UTF16_BOMS):
        raw = raw.decode("utf-16", "replace").encode("utf-8", "surrogatepass")
    elif raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM):]
    texts, skipped, fields = [], Counter(), []
    for raw_line in re.split(rb"\r\n|\r|\n", raw):
        if len(raw_line) > max_line:
            skipped[long_line_reason(max_line)] += 1
            continue
        for line in normalize_newlines(decode_utf8(raw_line)[0]).split("\n"):
            if not line.strip():
                continue
            if "\x00" in line:
                skipped[SKIP_NUL] += 1
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                skipped[SKIP_NOT_JSON] += 1
                continue
            if not isinstance(record, dict) or column not in record:
                skipped[missing_field_reason(column)] += 1
                names = record if isinstance(record, dict) else ()
                fields += [str(name) for name in names if name not in fields][:MAX_FIELDS_NAMED - len(fields)]
                continue
            value = record[column]
            if not isinstance(value, str):
                skipped[f"text column is {type(value).__name__}, not a string"] += 1
                continue
            try:
                texts.append(clean_text(value, keep_boilerplate=True).text)
            except NotText as reason:
                skipped[str(reason)] += 1
    reason = None
    if texts:
        return texts, skipped, reason
    if not skipped:
        return texts, skipped, SKIP_EMPTY
    if set(skipped) == {missing_field_reason(column)}:
        found = ", ".join(repr(name) for name in fields) if fields else "none (no record is a JSON object)"
        return texts, skipped, (f"no usable records: no record has the text field {column!r} (--text_column); "
                                f"fields found: {found}")
    counts = ", ".join(f"{n:,} {why}" for why, n in sorted(skipped.items()))
    return texts, skipped, f"no usable records ({counts})"


@st.composite
def jsonl_lines(draw) -> list[str]:
    value = st.one_of(PROSE, HOSTILE, st.integers(), st.none())
    record = st.one_of(st.builds(lambda v: json.dumps({"text": v}), value),
                       st.builds(lambda v: json.dumps({"text": v}, ensure_ascii=False), value),
                       st.builds(lambda v: json.dumps({"body": v}), value),
                       HOSTILE, st.just("not json {"), st.just('{"text": "raw nul \x00"}'))
    return draw(st.lists(record, max_size=40))


@pytest.mark.parametrize("run", RUNS)
def test_jsonl_streamed_and_split_equal_the_whole_file(tmp_path_factory, run):
    @given(lines=jsonl_lines(), encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]),
           newline=st.sampled_from(["\n", "\r\n", "\r"]), suffix=st.sampled_from(sorted(COMPRESSORS)),
           cuts=st.lists(st.integers(0, 4000), max_size=4), read_sizes=sizes(), split_bytes=st.integers(1, 500))
    def check(lines, encoding, newline, suffix, cuts, read_sizes, split_bytes):
        _check_jsonl(tmp_path_factory, lines, encoding, newline, suffix, cuts, read_sizes, split_bytes)

    run.run(check)


def _check_jsonl(tmp_path_factory, lines, encoding, newline, suffix, cuts, read_sizes, split_bytes):
    raw = _encode("\n".join(lines) + "\n", encoding, newline, junk=False)
    path = tmp_path_factory.mktemp("jsonl") / f"records.jsonl{suffix}"
    path.write_bytes(_compress(raw, suffix, cuts))
    want, want_skipped, want_reason = _jsonl_oracle(raw, "text", read_sizes.max_line_bytes)
    for units in (expand_inputs([str(path)]), split_large_inputs(expand_inputs([str(path)]), split_bytes)):
        texts, skipped, reasons = [], Counter(), []
        for unit in units:
            _, scan, got = _read(unit, "text", False, read_sizes)
            texts += got or []
            skipped.update(scan.records_skipped)
            reasons.append(scan.skip_reason)
        assert texts == want and skipped == want_skipped, len(units)
        if len(units) == 1:
            assert reasons[0] == want_reason  # the whole reason: counts, fields found


@pytest.mark.parametrize("run", RUNS)
def test_parquet_rows_equal_their_clean_texts(tmp_path_factory, run):
    @given(values=st.lists(st.one_of(PROSE, HOSTILE, st.none()), max_size=30), read_sizes=sizes())
    def check(values, read_sizes):
        path = tmp_path_factory.mktemp("parquet") / "rows.parquet"
        pq.write_table(pa.table({"text": pa.array(values, pa.string()), "id": list(range(len(values)))}), path)
        want = []
        for value in values:
            if isinstance(value, str) and value.strip():
                want.append(clean_text(value, keep_boilerplate=True).text)
        _, scan, texts = _read(expand_inputs([str(path)])[0], "text", False, read_sizes)
        assert (texts or []) == want and (scan.skip_reason is None) == bool(want)

    run.run(check)


ROW_EXAMPLES = max(1, EXAMPLES // 10)


@pytest.fixture(scope="module")
def row_tools(spec):
    from pipeline.tokenizer.fast import FastTokenizer
    from pipeline.tokenizer.spec import build_tokenizer
    from schemas.shard import id_dtype_for_vocab

    tokenizer = FastTokenizer(build_tokenizer(spec), spec.json)
    return tokenizer, id_dtype_for_vocab(spec.vocab_size)


@pytest.mark.parametrize("run", fuzz_runs(ROW_EXAMPLES, max(1, ROW_EXAMPLES // 3)))
def test_split_rows_equal_unsplit_rows(tmp_path_factory, spec, row_tools, run):
    @given(lines=st.lists(st.one_of(PROSE, HOSTILE), min_size=20, max_size=80),
           newline=st.sampled_from(["\n", "\r\n"]), split_bytes=st.integers(200, 900),
           packing=st.sampled_from(["doc", "concat", "sentences"]))
    def check(lines, newline, split_bytes, packing):
        _check_split_rows(tmp_path_factory, spec, row_tools, lines, newline, split_bytes, packing)

    run.run(check)


def test_a_last_line_held_back_at_the_inputs_end_is_the_last_splits(tmp_path_factory, spec, row_tools):
    """Found by the randomized run (MASKBEAM_FUZZ_SEED=2550310277): a book whose body ends on a
    `*** START OF ...` line with no newline after it (a second START inside a body is kept as text).
    The stripper holds that line back until the input's end; the last split took it for lookahead
    past its end and kept only its `***` (276 tokens against the whole file's 287)."""
    lines = ["The river ran past the mill."] * 19 + ["*** START OF THE PROJECT GUTENBERG EBOOK TEA ***"]
    _check_split_rows(tmp_path_factory, spec, row_tools, lines, "\n", 200, "doc")


def _check_split_rows(tmp_path_factory, spec, row_tools, lines, newline, split_bytes, packing):
    """Rows of the split path (scan, input splits, stitch) against the unsplit unit, byte for byte, in
    every packing mode (with sentences, a piece or split end is never taken for a sentence end)."""
    from pipeline.beam.input_splits import scan_for_splits, stitch_splits, tokenize_split
    from pipeline.beam.run.config import PreprocessConfig
    from pipeline.beam.units import StageClock, UnitContext, process_unit
    from pipeline.beam.writing.arrow_io import read_part

    tokenizer, dtype = row_tools
    folder = tmp_path_factory.mktemp("rows")
    raw = ("\n".join(line.replace("\x00", "") for line in lines) * 3).replace("\n", newline).encode()
    path = folder / "book.txt"
    path.write_bytes(raw)
    config = PreprocessConfig(inputs=(str(path),), output=str(folder / "out"), tokenizer="bert", packing=packing,
                              split_bytes=split_bytes, validation_fraction=0.3, min_tokens=4, max_seq_length=32)
    layout = spec.layout(config.max_seq_length, config.min_tokens)
    (unit,) = expand_inputs([str(path)])
    os.makedirs(folder / "whole")
    whole = process_unit(unit, UnitContext(layout, dtype, config, str(folder / "whole"), tokenizer))
    (marked,) = split_large_inputs([unit], split_bytes)
    os.makedirs(folder / "split")
    context = UnitContext(layout, dtype, config, str(folder / "split"), tokenizer)
    tasks = scan_for_splits(marked, context, StageClock())
    if not isinstance(tasks, list):
        split = tasks
    else:
        split = stitch_splits([tokenize_split(t, context) for t in tasks], context)
    assert (split.skip_reason, split.key, split.counts) == (whole.skip_reason, whole.key, whole.counts)
    for name in whole.parts:
        a, b = read_part(whole.parts[name][0], 32), read_part(split.parts[name][0], 32)
        assert a.ids.tobytes() == b.ids.tobytes() and a.seeds.tobytes() == b.seeds.tobytes()
