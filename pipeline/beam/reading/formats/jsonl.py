"""JSON Lines: the text field of each record of a `.jsonl` file (or of a byte range of one).

A bad line is a record skipped with its reason (not JSON, nested too deep, a number too long to
read, no such field, NUL bytes, too long), never the whole file; a file none of whose records has
the field says which fields it found.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator

from pipeline.beam.reading.formats.source import RecordScan, RecordSource, Skip
from pipeline.kernels.text.cleaning import SKIP_EMPTY, NotText
from pipeline.kernels.text.text_stream import RawTextStats

MAX_LINE_BYTES = 64 << 20  # a longer line is skipped as a record, never held whole
MAX_FIELDS_NAMED = 8
SKIP_NUL = "line holds NUL bytes"
SKIP_NOT_JSON = "line is not valid JSON"
SKIP_TOO_DEEP = "record nested too deeply to read"


def long_line_reason(max_line_bytes: int) -> str:
    return f"line longer than {max_line_bytes:,} bytes"


def long_number_reason() -> str:
    """Python refuses to read an integer of more digits than its limit (a ValueError, not a JSON error)."""
    return f"record holds an integer of more than {sys.get_int_max_str_digits():,} digits"


def missing_field_reason(column: str) -> str:
    return f"record has no {column!r} field"


class FieldsSeen:
    """The field names of the records that lacked the text column (the first few), for the reason."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, record: object) -> None:
        if isinstance(record, dict):
            for name in record:
                if name not in self.names and len(self.names) < MAX_FIELDS_NAMED:
                    self.names.append(str(name))

    def describe(self, column: str) -> str:
        found = ", ".join(repr(n) for n in self.names) if self.names else "none (no record is a JSON object)"
        return f"no record has the text field {column!r} (--text_column); fields found: {found}"


def jsonl_values(pieces: Iterable[str], column: str, skip: Callable[[str], None],
                 fields: FieldsSeen | None = None) -> Iterator[object]:
    """The `column` value of each record in decoded pieces that end at line ends; `skip(reason)`
    for each line that is not a usable record."""
    for piece in pieces:
        for line in piece.split("\n"):
            if not line.strip():
                continue
            if "\x00" in line:
                skip(SKIP_NUL)
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                skip(SKIP_NOT_JSON)
                continue
            except ValueError as error:  # not a JSONDecodeError: an integer past Python's digit limit
                skip(long_number_reason() if "integer" in str(error) else SKIP_NOT_JSON)
                continue
            except RecursionError:
                skip(SKIP_TOO_DEEP)
                continue
            if not isinstance(record, dict) or column not in record:
                if fields is not None:
                    fields.add(record)
                skip(missing_field_reason(column))
                continue
            yield record[column]


def read_jsonl(source: RecordSource, column: str, skip: Skip, scan: RecordScan | None) -> Iterator[object]:
    """The `column` value of each record of a `.jsonl` unit (a file, or a byte range of whole lines
    of one); on the first pass (`scan`) its replaced bytes and why no record had the field.

    Raises:
        NotText: (first pass) the unit holds no text and no line to skip.
    """
    stats = RawTextStats()
    fields = FieldsSeen()
    has_text = False
    long_line = long_line_reason(source.max_line_bytes)

    def pieces() -> Iterator[str]:
        nonlocal has_text
        for piece in source.decoded_lines(stats, on_long_line=lambda length: skip(long_line)):
            has_text = has_text or not (piece == "" or piece.isspace())
            yield piece

    yield from jsonl_values(pieces(), column, skip, fields)
    if scan is not None:
        # No whole-input binary share here: each line is judged as a record (a byte range
        # must judge its lines as the whole file does, whatever else the file holds).
        if not has_text and not scan.records_skipped:
            raise NotText(SKIP_EMPTY)
        scan.replaced_bytes = stats.replaced
        if scan.records_skipped.get(missing_field_reason(column)):
            scan.missing_field = fields.describe(column)
