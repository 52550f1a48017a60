"""Arrow IPC stream files as numpy arrays: fixed-size-list columns to (n, L) arrays and back, and
memory-mapped shards whose record batches stay in the map (no copy onto the heap)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.storage import filesystem


def numpy_array(values: np.ndarray) -> pa.Array:
    """A 1-D numpy array of integers or floats as the Arrow array `pa.array` makes of it (no nulls),
    without copying and without `pa.array`'s probe for pandas objects, which imports pandas (~0.4
    CPU-seconds of every worker process) the first time it runs. Other dtypes go to `pa.array`."""
    if values.ndim != 1 or values.dtype.kind not in "iuf" or not values.dtype.isnative:
        return pa.array(values)
    flat = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(flat.dtype), len(flat), [None, pa.py_buffer(flat)])


_NUMPY_TYPES = {pa.from_numpy_dtype(np.dtype(name)): np.dtype(name) for name in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")}


def array_to_numpy(values: pa.Array) -> np.ndarray:
    """A numeric Arrow array without nulls as the read-only numpy view `to_numpy` gives of it, without
    `to_numpy`'s import of pandas (see `numpy_array`); any other array goes to `to_numpy`."""
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None or values.null_count:
        return values.to_numpy(zero_copy_only=False)
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=len(values), offset=values.offset * dtype.itemsize)


def fixed_list_array(rows: np.ndarray) -> pa.FixedSizeListArray:
    """A (n, L) array as an Arrow fixed_size_list<L> column without copying."""
    n, width = rows.shape
    return pa.FixedSizeListArray.from_arrays(numpy_array(np.ascontiguousarray(rows).reshape(-1)), width)


def _list_values(chunk: pa.Array) -> pa.Array:
    """The values of a fixed_size_list chunk's lists, as `flatten()` gives them. Without nulls (every
    shard), the slice of its child array: `flatten()` imports pyarrow.compute (~0.13 CPU-s of a
    process) the first time it runs."""
    if isinstance(chunk, pa.FixedSizeListArray) and not chunk.null_count:
        size = chunk.type.list_size
        return chunk.values.slice(chunk.offset * size, len(chunk) * size)
    return chunk.flatten()


def fixed_list_to_numpy(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A fixed_size_list<L> column as a (n, L) numpy array (zero-copy for a single chunk)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    arrays = [array_to_numpy(_list_values(chunk)).reshape(-1, width) for chunk in chunks]
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
