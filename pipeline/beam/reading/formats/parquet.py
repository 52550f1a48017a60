"""Parquet: the text column of a file's rows, read in record batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pipeline.beam.reading.formats.source import RecordScan, RecordSource, Skip
from pipeline.kernels.text.cleaning import NotText

PARQUET_BATCH_ROWS = 4096
SKIP_NOT_UTF8 = "text value is not valid UTF-8"


def parquet_values(handle, column: str, skip: Callable[[str], None],
                   batch_rows: int = PARQUET_BATCH_ROWS) -> Iterator[object]:
    """The `column` values of an open parquet file, row by row; `skip(reason)` for each value that
    cannot be read (a string column's invalid UTF-8: the writer did not check it).

    Raises:
        NotText: the file has no such column (the reason names the columns it has).
    """
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle)
    if column not in parquet.schema_arrow.names:
        raise NotText(f"parquet file has no column {column!r} (columns: {parquet.schema_arrow.names})")
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=[column]):
        values = batch.column(0)
        try:
            yield from values.to_pylist()
        except UnicodeDecodeError:  # nothing of the batch was handed out: read it value by value
            for value in values:
                try:
                    python = value.as_py()
                except UnicodeDecodeError:
                    skip(SKIP_NOT_UTF8)
                    continue
                yield python


def read_parquet(source: RecordSource, column: str, skip: Skip, scan: RecordScan | None) -> Iterator[object]:
    """The `column` values of a parquet unit's file (see `parquet_values`)."""
    with source.open_file() as handle:
        yield from parquet_values(handle, column, skip)
