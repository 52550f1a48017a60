"""The input formats, in one table: what a file's name says it is, how a large one is spread over
workers, and which reader reads it. Listing (`format_of_path`), work units (`split_large_inputs`),
the reader (`UnitReader`) and the per-unit counts ask this table, never a format's name; adding a
format is adding one `InputFormat` here (and its reader module beside this one).

A format is read one of two ways:

* as one text document (`records` False: plain text), by the reader's own two passes over the
  text (`formats.text.scan_text_input`, then the clean pieces);
* as records (`records` True), by its `read` function: the text column's value of each record,
  with `skip(reason)` for each record that is not usable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeline.beam.reading.compression import COMPRESSED_SUFFIXES
from pipeline.beam.reading.formats.hf import read_hf
from pipeline.beam.reading.formats.jsonl import read_jsonl
from pipeline.beam.reading.formats.parquet import read_parquet
from pipeline.beam.reading.formats.source import RecordScan, RecordSource, Skip

FORMAT_TEXT = "text"
FORMAT_JSONL = "jsonl"
FORMAT_PARQUET = "parquet"
FORMAT_HF = "hf_dataset"

# How a large uncompressed file of a format is spread over workers (compressed files never are).
SPREAD_NONE = "none"  # one worker reads it whole
SPREAD_LINE_RANGES = "line_ranges"  # cut when listed into byte ranges of whole lines (`reading.byte_ranges`)
SPREAD_INPUT_SPLITS = "input_splits"  # scanned by one worker, which cuts it (`pipeline.beam.input_splits`)

RecordReader = Callable[[RecordSource, str, Skip, "RecordScan | None"], Iterator[object]]


@dataclass(frozen=True)
class InputFormat:
    """One input format (a WorkUnit's `format` is its `name`)."""

    name: str
    suffixes: tuple[str, ...]  # how a file's name ends, compression suffix removed (none: never by name)
    records: bool  # records with a text column (False: the whole input is one text document)
    from_file: bool = True  # False: rows of a `datasets` dataset (no file to open, check or count)
    spread: str = SPREAD_NONE
    read: RecordReader | None = None  # records: the text column's values (first pass: `scan` given)


TEXT = InputFormat(FORMAT_TEXT, (), records=False, spread=SPREAD_INPUT_SPLITS)
JSONL = InputFormat(FORMAT_JSONL, (".jsonl", ".ndjson", ".json"), records=True, spread=SPREAD_LINE_RANGES,
                    read=read_jsonl)
PARQUET = InputFormat(FORMAT_PARQUET, (".parquet",), records=True, read=read_parquet)
HF_DATASET = InputFormat(FORMAT_HF, (), records=True, from_file=False, read=read_hf)

FORMATS: dict[str, InputFormat] = {f.name: f for f in (TEXT, JSONL, PARQUET, HF_DATASET)}
UNCLAIMED_NAMES = TEXT  # a file whose name no format claims is read as plain text


def input_format(name: str) -> InputFormat:
    """The format a WorkUnit's `format` names.

    Raises:
        ValueError: no such format (a unit built by hand with a misspelt format).
    """
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown input format {name!r}: one of {', '.join(FORMATS)}") from None


def format_of_path(path: str) -> InputFormat:
    """The format of a file from its name, compression suffix ignored (plain text when no format
    claims the name)."""
    name = path.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    for fmt in FORMATS.values():
        if fmt.suffixes and name.endswith(fmt.suffixes):
            return fmt
    return UNCLAIMED_NAMES
