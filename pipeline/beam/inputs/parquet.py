"""Parquet: the text column of a file's rows, read in record batches."""

from __future__ import annotations

from collections.abc import Iterator

from pipeline.kernels.cleaning import NotText

PARQUET_BATCH_ROWS = 4096


def parquet_values(handle, column: str, batch_rows: int = PARQUET_BATCH_ROWS) -> Iterator[object]:
    """The `column` values of an open parquet file, row by row.

    Raises:
        NotText: the file has no such column (the reason names the columns it has).
    """
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle)
    if column not in parquet.schema_arrow.names:
        raise NotText(f"parquet file has no column {column!r} (columns: {parquet.schema_arrow.names})")
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=[column]):
        yield from batch.column(0).to_pylist()
