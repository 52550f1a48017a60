"""Arrow IPC stream files as numpy arrays: fixed-size-list columns to (n, L) arrays and back, and
memory-mapped shards whose record batches stay in the map (no copy onto the heap)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.storage import filesystem


def fixed_list_array(rows: np.ndarray) -> pa.FixedSizeListArray:
    """A (n, L) array as an Arrow fixed_size_list<L> column without copying."""
    n, width = rows.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(rows).reshape(-1)), width)


def fixed_list_to_numpy(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A fixed_size_list<L> column as a (n, L) numpy array (zero-copy for a single chunk)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    arrays = [chunk.flatten().to_numpy(zero_copy_only=False).reshape(-1, width) for chunk in chunks]
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays) if arrays else np.zeros((0, width))


def open_batches(path: str) -> list[pa.RecordBatch]:
    """The record batches of an Arrow IPC stream: memory-mapped for a local file (the buffers stay
    in the map, so RSS grows only with the pages touched), read into memory otherwise."""
    if filesystem.is_local(path):
        source = pa.memory_map(path.removeprefix("file://"), "r")
    else:
        source = pa.BufferReader(filesystem.read_bytes(path))
    return list(pa.ipc.open_stream(source))


def read_table(path: str) -> pa.Table:
    """A whole Arrow IPC stream file as a table (memory-mapped when local)."""
    batches = open_batches(path)
    if not batches:
        with filesystem.open_binary(path) as handle:
            return pa.ipc.open_stream(handle).read_all()
    return pa.Table.from_batches(batches)
