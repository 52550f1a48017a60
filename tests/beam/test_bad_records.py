"""One bad record is one skipped record: a `.jsonl` or parquet record whose text no tokenizer takes
(a lone surrogate), a number Python refuses to read, nesting past the JSON reader's depth, bytes
that are not UTF-8, went through the worker's `process_unit` as the job runs it (real tokenizer, real
files) and failed the whole run (issue 36). Every record is now processed or skipped with a reason;
the fuzz runs draw record values and raw lines at random (MASKBEAM_FUZZ_EXAMPLES each; a failure
prints its example) on top of the fixed regression examples."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.beam.reading.formats.jsonl import SKIP_TOO_DEEP, long_number_reason
from pipeline.beam.reading.formats.parquet import SKIP_NOT_UTF8
from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.kernels.text.cleaning import SKIP_SURROGATE, decode
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m

EXAMPLES = int(os.environ.get("MASKBEAM_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])
GOOD = "The kettle sang on the stove while the rain fell over the quiet town."
DEEP = 100_000  # past any recursion limit the JSON reader works under


@pytest.fixture(scope="module")
def worker(spec):
    """What a worker holds: the real tokenizer, the row layout, the id dtype, the config (its temp_dir set per input)."""
    config = PreprocessConfig(inputs=("x",), output="unused", tokenizer="bert", max_seq_length=32, min_tokens=1,
                              max_unk_fraction=1.0, validation_fraction=0.0)
    tokenizer = FastTokenizer(build_tokenizer(spec), spec.json)
    return UnitContext.from_spec(spec, config, "", tokenizer)


def _process(path: Path, worker):
    with tempfile.TemporaryDirectory() as temp:
        return process_unit(expand_inputs([str(path)])[0], dataclasses.replace(worker, temp_dir=temp))


def _jsonl(folder: Path, lines: list[bytes], encoding: str = "utf-8") -> Path:
    path = folder / "records.jsonl"
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data if encoding == "utf-8" else data.decode("utf-8", "replace").encode(encoding))
    return path


def _record(value: object) -> bytes:
    return json.dumps({"text": value}).encode()  # ASCII: a lone surrogate is written as `\ud800`


def test_a_record_with_a_lone_surrogate_is_one_skipped_record(tmp_path, worker):
    """`{"text": "... \\ud800 ..."}` failed the run: TypeError from the tokenizer, exit 1."""
    path = _jsonl(tmp_path, [_record(GOOD), _record("bad \ud800 text " + GOOD), _record(GOOD + " again")])
    result = _process(path, worker)
    assert result.skip_reason is None, result.skip_reason
    assert result.records_skipped == {SKIP_SURROGATE: 1}
    assert result.counts[m.DOCUMENTS] == 2 and result.counts[m.ROWS] >= 2


def test_a_long_integer_and_deep_nesting_are_skipped_records_not_a_lost_file(tmp_path, worker):
    """A 5,000-digit integer skipped the whole file as unreadable (ValueError); nesting past the
    recursion limit failed the run (RecursionError)."""
    deep = b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    path = _jsonl(tmp_path, [_record(GOOD), b'{"text": "x", "n": ' + b"7" * 5000 + b"}", deep, _record(GOOD)])
    result = _process(path, worker)
    assert result.skip_reason is None, result.skip_reason
    assert result.records_skipped == {long_number_reason(): 1, SKIP_TOO_DEEP: 1}
    assert result.counts[m.DOCUMENTS] == 2


def test_a_parquet_value_that_is_not_utf8_is_one_skipped_record(tmp_path, worker):
    """A string column holding invalid UTF-8 (pyarrow writes what it is given) skipped the whole file."""
    values = pa.array([GOOD.encode(), b"caf\xe9 " + GOOD.encode(), b"sur \xed\xa0\x80 rogate", None,
                       (GOOD + " end").encode()]).view(pa.string())
    pq.write_table(pa.table({"text": values}), tmp_path / "rows.parquet")
    result = _process(tmp_path / "rows.parquet", worker)
    assert result.skip_reason is None, result.skip_reason
    assert result.records_skipped == {SKIP_NOT_UTF8: 2, "text column is NoneType, not a string": 1}
    assert result.counts[m.DOCUMENTS] == 2


# -- fuzz: every record processed or skipped with a reason, never a dead run --------------------------

ANY_CHAR = st.characters(blacklist_categories=())  # surrogates (Cs) included, but rarely drawn
SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, blacklist_categories=())
TEXT = st.lists(st.one_of(st.sampled_from(GOOD.split()), st.text(ANY_CHAR, max_size=4), SURROGATE,
                          st.sampled_from(["\x00", "\ufffd", "\u2028", "\r", "\x85", "\U0001F600"])),
                max_size=8).map(" ".join)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30), st.floats(), TEXT)
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                         max_size=3), max_leaves=6)
NO_NEWLINE = st.binary(max_size=40).map(lambda data: data.replace(b"\n", b" ").replace(b"\r", b" "))
LINE = st.one_of(
    VALUE.map(_record),
    TEXT.map(_record),
    st.dictionaries(st.text(ANY_CHAR, max_size=3), VALUE, max_size=3).map(lambda d: json.dumps(d).encode()),
    NO_NEWLINE,  # not UTF-8, NUL bytes, not JSON
    NO_NEWLINE.map(lambda raw: b'{"text": "' + raw.replace(b'"', b"'").replace(b"\\", b"/") + b'"}'),
    st.integers(4301, 6000).map(lambda n: b'{"text": ' + b"9" * n + b"}"),
    st.sampled_from([10, DEEP]).map(lambda d: b'{"text": ' + b"[" * d + b"]" * d + b"}"),
)


def _non_blank_lines(data: bytes) -> int:
    """The records the reader sees: the decoded file's lines that are not blank."""
    return sum(1 for line in decode(data)[0].split("\n") if line.strip())


def _check_every_record_accounted_for(result, records: int) -> None:
    assert all(isinstance(reason, str) and reason for reason in result.records_skipped), result.records_skipped
    assert result.counts[m.DOCUMENTS] + result.counts[m.RECORDS_SKIPPED] == records, (result.skip_reason, result.counts)
    assert sum(result.records_skipped.values()) == result.counts[m.RECORDS_SKIPPED]
    assert result.skip_reason is None or result.skip_reason.startswith(("no usable records", "empty", "[UNK]")), \
        result.skip_reason


@SETTINGS
@given(lines=st.lists(LINE, max_size=8), encoding=st.sampled_from(["utf-8", "utf-16"]))
@example(lines=[_record("lone \ud800 surrogate"), _record(GOOD)], encoding="utf-8")
@example(lines=[_record("\udfff"), b'{"text": ' + b"1" * 5000 + b"}", _record(GOOD)], encoding="utf-16")
@example(lines=[b'{"text": "caf\xe9 \x00 ' + b'"}', b"\xff\xfe\x00", _record(GOOD)], encoding="utf-8")
def test_fuzzed_jsonl_records_are_each_processed_or_skipped_with_a_reason(worker, lines, encoding):
    with tempfile.TemporaryDirectory() as folder:
        path = _jsonl(Path(folder), lines, encoding)
        result = _process(path, worker)
        _check_every_record_accounted_for(result, _non_blank_lines(path.read_bytes()))


PARQUET_COLUMN = st.one_of(
    st.lists(st.one_of(st.none(), st.binary(max_size=20), TEXT.map(lambda t: t.encode("utf-8", "replace"))),
             min_size=1, max_size=8).map(lambda values: pa.array(values, pa.binary()).view(pa.string())),
    st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), min_size=1, max_size=8).map(pa.array),
    st.lists(st.floats(), min_size=1, max_size=8).map(pa.array),
    st.lists(st.lists(st.sampled_from(GOOD.split()), max_size=3), min_size=1, max_size=8).map(pa.array),
    st.lists(st.fixed_dictionaries({"a": st.sampled_from(GOOD.split())}), min_size=1, max_size=8).map(pa.array),
)


@SETTINGS
@given(column=PARQUET_COLUMN)
def test_fuzzed_parquet_values_are_each_processed_or_skipped_with_a_reason(worker, column):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.parquet"
        pq.write_table(pa.table({"text": column}), path)
        _check_every_record_accounted_for(_process(path, worker), len(column))
