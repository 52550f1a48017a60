"""Rows of a local shard file copied straight into a batch being built.

A shard is an Arrow IPC stream whose columns are fixed-width per row (fixed_size_list<L> ids,
attention, labels; or a uint64 mask seed), so row r of a column is `row_bytes` contiguous bytes at a
file position known from the record batch layout. Two readers with one interface:

- `PreadShard` (default on POSIX): learns the layout from a memory map of the file, unmaps it, and
  copies each requested row with `pread` (a numba kernel calling libc, one call per batch). The file's
  pages stay in the kernel's page cache, shared by every process and never mapped into this one, so a
  DataLoader worker's RSS holds its batches, not the pages of the output it has read.
- `MappedShard`: gathers from numpy views into the memory map (no system call per row). Pages touched
  count in the process's RSS (shared, reclaimable page cache; the kernel maps 64 KB around each touch,
  so random rows map a whole output into every worker within a few dozen batches).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import types

from pipeline.kernels.common.jit import kernel
from pipeline.storage.arrow_files import fixed_list_to_numpy
from schemas.options import DEFAULT_READ_MODE, READ_MMAP, READ_MODES, READ_PREAD

# Resolved by name when the kernel is linked (libc is in every process), so the kernel caches on disk
# (a ctypes function pointer would be a per-process constant numba refuses to cache).
_pread = types.ExternalFunction("pread", types.int64(types.int32, types.uintp, types.uintp, types.int64))


class ShardReadError(OSError):
    """A shard file is shorter than its layout says, or cannot be read."""


@dataclass(frozen=True)
class Column:
    """A column to gather: its name and its values per row (L for fixed_size_list<L>, 0 for a scalar)."""

    name: str
    width: int


@dataclass(frozen=True)
class ShardLayout:
    """Where a shard's rows lie in its file: a few KB, kept to reopen the file without parsing it."""

    starts: np.ndarray  # (n_batches + 1,) cumulative rows: record batch b holds rows starts[b]:starts[b + 1]
    positions: np.ndarray  # (n_columns, n_batches) file position of row 0 of each column in each batch
    row_bytes: np.ndarray  # (n_columns,) bytes of one row of each column
    dtypes: list[np.dtype]


@kernel()
def _pread_rows(fd, rows, dest, batch_starts, batch_positions, row_bytes, out_addresses, first):  # pragma: no cover
    """Copy row rows[k] of every column c to row dest[k] of out c, from the flat position `first`
    (c * rows.size + k) on; -1 when done, else the flat position of the first row not copied (a
    pread that failed or returned short: the caller retries it in Python, which names the error)."""
    n = rows.size
    for c in range(first // n if n else row_bytes.size, row_bytes.size):
        size = row_bytes[c]
        for k in range(first - c * n if c * n < first else 0, n):
            r = rows[k]
            b = np.searchsorted(batch_starts, r, side="right") - 1
            position = batch_positions[c, b] + (r - batch_starts[b]) * size
            address = out_addresses[c] + np.uint64(dest[k] * size)
            done = 0
            while done < size:  # a regular file returns all bytes but at its end; loop for the letter of pread
                got = _pread(np.int32(fd), address + np.uint64(done), np.uint64(size - done), position + done)
                if got <= 0:
                    return c * n + k
                done += got
    return -1


def _column_view(batch: pa.RecordBatch, column: Column) -> np.ndarray:
    values = batch.column(column.name)
    return fixed_list_to_numpy(values, column.width) if column.width else values.to_numpy()


class MappedShard:
    """A shard's record batches as numpy views into its memory map (see the module docstring)."""

    layout = None  # the views are the layout: nothing to keep for a reopening

    def __init__(self, path: str, columns: list[Column]) -> None:
        self.path = path
        self._map = pa.memory_map(path, "r")
        self.batches = [[_column_view(batch, c) for c in columns] for batch in pa.ipc.open_stream(self._map)]
        self.starts = np.cumsum([0] + [views[0].shape[0] for views in self.batches])
        self.dtypes = [np.dtype(self.batches[0][i].dtype) if self.batches else np.dtype(np.int32)
                       for i in range(len(columns))]

    @property
    def rows(self) -> int:
        return int(self.starts[-1])

    def gather(self, rows: np.ndarray, dest: np.ndarray, outs: list[np.ndarray]) -> None:
        """Row rows[k] of column c into outs[c][dest[k]]."""
        which = np.searchsorted(self.starts, rows, side="right") - 1
        local = rows - self.starts[which]
        order = np.argsort(which, kind="stable")  # rows grouped by record batch, one gather each
        starts = np.flatnonzero(np.diff(which[order], prepend=-1))
        for start, stop in zip(starts, [*starts[1:], order.size]):
            picked = order[start:stop]
            views, at, to = self.batches[which[picked[0]]], local[picked], dest[picked]
            for view, out in zip(views, outs):
                out[to] = view[at]

    def close(self) -> None:
        """Close the file and drop the views; the map goes once no array holds a view into it."""
        self.batches = []
        self._map.close()


def read_layout(path: str, columns: list[Column]) -> ShardLayout:
    """The layout of a shard file, read from a memory map that is closed again (only the pages of the
    record batch headers are touched)."""
    size = os.path.getsize(path)
    with pa.memory_map(path, "r") as mapped:
        base = mapped.read_buffer(1).address if size else 0  # a 1-byte slice: no page is touched
        mapped.seek(0)
        starts, positions, row_bytes, dtypes = [0], [[] for _ in columns], [], []
        for batch in pa.ipc.open_stream(mapped):
            for i, column in enumerate(columns):
                view = _column_view(batch, column)
                stride = view.dtype.itemsize * max(column.width, 1)
                position = view.ctypes.data - base
                if view.shape[0] and not (view.flags.c_contiguous and position >= 0
                                          and position + view.shape[0] * stride <= size):
                    raise ShardReadError(f"{path}: column {column.name!r} is not stored as fixed-width rows in the "
                                         "file (nulls or a chunked layout?): read it with read_mode='mmap'")
                positions[i].append(position)
                if len(dtypes) < len(columns):
                    dtypes.append(np.dtype(view.dtype))
                    row_bytes.append(stride)
            starts.append(starts[-1] + batch.num_rows)
    return ShardLayout(np.asarray(starts, dtype=np.int64),
                       np.asarray(positions, dtype=np.int64).reshape(len(columns), -1),
                       np.asarray(row_bytes or [0] * len(columns), dtype=np.int64),
                       dtypes or [np.dtype(np.int32)] * len(columns))


class PreadShard:
    """A shard read row by row with pread (see the module docstring).

    Thread-safe: the jitted gather runs without the GIL, so `close` (e.g. by the open-file cap on
    another thread) never closes the descriptor under a gather in flight (the number could be reused
    at once by another file); the last gather to leave closes it.
    """

    def __init__(self, path: str, columns: list[Column], layout: ShardLayout | None = None) -> None:
        """`layout`: one read before from the same file (reopening then costs one `open`)."""
        self.path = path
        self.layout = layout or read_layout(path, columns)
        self.starts, self.positions, self.row_bytes = self.layout.starts, self.layout.positions, self.layout.row_bytes
        self.dtypes = self.layout.dtypes
        self._lock = threading.Lock()
        self._users = 0  # gathers in flight
        self._closing = False
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    @property
    def rows(self) -> int:
        return int(self.starts[-1])

    def _check(self, rows: np.ndarray, dest: np.ndarray, outs: list[np.ndarray]) -> None:
        if len(outs) != len(self.row_bytes):
            raise ValueError(f"{len(outs)} output arrays for the {len(self.row_bytes)} columns of {self.path}")
        if rows.shape != dest.shape or rows.ndim != 1:
            raise ValueError(f"rows {rows.shape} and dest {dest.shape} must be 1-D and of one length")
        for out, dtype, size in zip(outs, self.dtypes, self.row_bytes):
            if (not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable
                    or out.ndim not in (1, 2) or out.dtype != dtype or out.itemsize * (out[0].size if out.ndim == 2
                                                                                       else 1) != size):
                raise ValueError(f"output array {getattr(out, 'dtype', type(out))}{getattr(out, 'shape', '')} does not "
                                 f"take rows of {size} bytes of {dtype} (C-contiguous, writeable)")
        if rows.size and (rows.min() < 0 or rows.max() >= self.rows):
            raise IndexError(f"row {rows.max() if rows.max() >= self.rows else rows.min()} is outside "
                             f"{self.path} ({self.rows} rows)")
        room = min(out.shape[0] for out in outs) if outs else 0
        if dest.size and (dest.min() < 0 or dest.max() >= room):
            raise IndexError(f"destination row {dest.max() if dest.max() >= room else dest.min()} is outside the "
                             f"output arrays ({room} rows)")

    def gather(self, rows: np.ndarray, dest: np.ndarray, outs: list[np.ndarray]) -> None:
        """Row rows[k] of column c into outs[c][dest[k]].

        Args:
            rows: int, shape (K,): rows of this shard, each in [0, self.rows).
            dest: int, shape (K,): rows of the outputs, each in [0, len(out)) for every out.
            outs: one C-contiguous, writeable array per column, of this shard's dtypes: (N, L) for
                a fixed_size_list<L> column, (N,) for a scalar one.

        Raises:
            ValueError: wrong number, shape, dtype or layout of output arrays.
            IndexError: a row outside the shard, or a destination outside the outputs.
            ShardReadError: the file cannot be read (truncated or replaced while open, an I/O error).
        """
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        dest = np.ascontiguousarray(dest, dtype=np.int64)
        self._check(rows, dest, outs)
        with self._lock:
            if self._fd < 0 or self._closing:
                raise ShardReadError(f"{self.path}: the shard was closed")
            self._users += 1
        try:
            self._gather(rows, dest, outs)
        finally:
            with self._lock:
                self._users -= 1
                if self._closing and not self._users:
                    self._close_now()

    def _gather(self, rows: np.ndarray, dest: np.ndarray, outs: list[np.ndarray]) -> None:
        addresses = np.asarray([out.ctypes.data for out in outs], dtype=np.uint64)
        at = 0
        while True:
            at = _pread_rows(self._fd, rows, dest, self.starts, self.positions, self.row_bytes, addresses, at)
            if at < 0:
                return
            # One row the kernel could not copy: read it again here, where os.pread retries EINTR (PEP 475)
            # and a real error is an OSError naming it; then the kernel goes on from the next row.
            c, k = divmod(int(at), rows.size)
            r, size = int(rows[k]), int(self.row_bytes[c])
            b = int(np.searchsorted(self.starts, r, side="right")) - 1
            position = int(self.positions[c, b]) + (r - int(self.starts[b])) * size
            try:
                data = os.pread(self._fd, size, position)
            except OSError as error:
                raise ShardReadError(f"{self.path}: could not read row {r}: {error}") from error
            if len(data) != size:
                raise ShardReadError(f"{self.path}: could not read row {r} (the file is shorter than its record "
                                     "batches say: truncated or replaced while open?)")
            outs[c].reshape(outs[c].shape[0], -1).view(np.uint8)[dest[k]] = np.frombuffer(data, np.uint8)
            at += 1

    def _close_now(self) -> None:
        if self._fd >= 0:  # in a forked process, its own copy of the descriptor
            os.close(self._fd)
        self._fd = -1

    def close(self) -> None:
        """Close the file now, or (a gather in flight on another thread) when the last gather leaves."""
        with self._lock:
            self._closing = True
            if not self._users:
                self._close_now()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self._close_now()


def open_shard(path: str, columns: list[Column], read_mode: str = DEFAULT_READ_MODE,
               layout: ShardLayout | None = None) -> PreadShard | MappedShard:
    """A local shard file opened for row gathers with `read_mode` ('pread' or 'mmap'); `layout`, the
    `.layout` of an earlier opening of the same file, spares pread the parsing."""
    if read_mode == READ_PREAD:
        return PreadShard(path, columns, layout)
    if read_mode == READ_MMAP:
        return MappedShard(path, columns)
    raise ValueError(f"read_mode must be one of {', '.join(READ_MODES)}, got {read_mode!r}")
