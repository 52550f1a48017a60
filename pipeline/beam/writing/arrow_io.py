"""Arrow IPC files: the unmasked per-input parts (IPC file format, for random access to their record
batches) and the final shards (IPC stream format, what `datasets` maps); local ones are written
under a temp name, then renamed.

Everything goes through Beam's FileSystems, so the same code writes to local disk, GCS or S3.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.storage.arrow_files import array_to_numpy, fixed_list_array, fixed_list_to_numpy, numpy_array
from schemas.manifest import PARTIAL_SUFFIX, TEMP_DIR
from schemas.shard import INPUT_IDS, MASK_SEED, PART_LENGTH, ROWS_PER_RECORD_BATCH


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through it."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self.sha256 = hashlib.sha256()
        self.bytes = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.bytes += view.nbytes
        self._handle.write(view)
        return view.nbytes

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class WrittenFile:
    path: str
    rows: int
    bytes: int
    sha256: str


class AtomicArrowWriter:
    """Write Arrow record batches to `path + .partial`, then rename it to `path` on `close()`
    (object stores: straight to `path`, whose upload appears only once complete). The IPC stream
    format by default; `random_access` writes the IPC file format, whose footer lets a reader fetch
    one record batch without reading those before it.

    A reader never sees a partial file under the final name; rewriting the same path (a retried
    bundle) replaces it with identical bytes.
    """

    def __init__(self, path: str, schema: pa.Schema, random_access: bool = False) -> None:
        self.path = path
        self._temp = partial_name(path)
        self._handle = FileSystems.create(self._temp, compression_type=CompressionTypes.UNCOMPRESSED)
        self._sink = _HashingWriter(self._handle)
        new = pa.ipc.new_file if random_access else pa.ipc.new_stream
        self._writer = new(pa.PythonFile(self._sink, mode="w"), schema)
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> WrittenFile:
        self._writer.close()
        self._handle.close()
        publish_file(self._temp, self.path)
        return WrittenFile(path=self.path, rows=self.rows, bytes=self._sink.bytes, sha256=self._sink.sha256.hexdigest())

    def abort(self) -> None:
        """Close and delete what was written. Locally that is the temp file and the final name is
        never touched; on an object store the writer writes the final name itself, so closing
        completes that object (replacing one an earlier attempt left) and it is then deleted."""
        try:
            self._writer.close()
            self._handle.close()
        finally:
            if FileSystems.exists(self._temp):
                FileSystems.delete([self._temp])


def write_stream_atomically(path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> WrittenFile:
    """Write an uncompressed Arrow IPC stream atomically (see AtomicArrowWriter)."""
    writer = AtomicArrowWriter(path, schema)
    try:
        for batch in batches:
            writer.write(batch)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def write_text(path: str, text: str) -> None:
    """Write a small text file through FileSystems (locally: temp name, then rename)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Write a file through FileSystems whole or not at all under its name (locally: temp name, then
    rename): a reader never sees a part of it, as when a runner reruns the step that wrote it while
    another step reads it."""
    write_chunks(path, [data])


def write_chunks(path: str, chunks: Iterable[bytes]) -> None:
    """`write_bytes` of the bytes `chunks` gives, written as they come: the file is never held."""
    temp = partial_name(path)
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        for chunk in chunks:
            handle.write(chunk)
    publish_file(temp, path)


def partial_name(path: str) -> str:
    """Where a file is written before it is renamed to `path` (`renames_needed`; else `path`).

    In the job's temp folder, a name of this writer's own ending in .partial: two writers of one
    file (a step a runner runs again while the first run still writes: Beam's Dask runner computes a
    side input's steps anew) never write into one temp file, each rename puts a whole file under the
    name, and what a killed writer leaves goes with the folder. Elsewhere (the output's shards and
    side files, written once each at the end of the job) `path.partial`, which the next writer of
    `path` (a resumed run) replaces: a killed run leaves no file of its own there."""
    if not renames_needed(path):
        return path
    if f"/{TEMP_DIR}/" in path.replace("\\", "/"):
        return f"{path}.{uuid.uuid4().hex[:16]}{PARTIAL_SUFFIX}"
    return path + PARTIAL_SUFFIX


def renames_needed(path: str) -> bool:
    """Local files are written under a temporary name and renamed, so a reader never sees a partial
    file under the final name. An object store's upload appears only once complete, and its
    "rename" is a copy and a delete: objects are written under their final name directly."""
    return FileSystems.get_scheme(path) in (None, "file")


def publish_file(temp: str, path: str) -> None:
    """Rename `temp` to `path`. A local rename replaces a file already there in one step (POSIX
    rename): a reader finds the old file or the new one, never none."""
    if temp == path:
        return
    if FileSystems.get_scheme(path) in (None, "file"):
        os.replace(_local(temp), _local(path))
        return
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temp], [path])


def _local(path: str) -> str:
    """A local path as the OS names it (a file:// URL's path)."""
    return path.removeprefix("file://")


def read_text(path: str) -> str:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read().decode("utf-8")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def part_batch(rows: np.ndarray, lengths: np.ndarray, seeds: np.ndarray, schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([fixed_list_array(rows), numpy_array(lengths), numpy_array(seeds)], schema=schema)


@dataclass(frozen=True)
class PartRows:
    ids: np.ndarray  # (n, L)
    lengths: np.ndarray  # int32 (n,)
    seeds: np.ndarray  # uint64 (n,)


def read_table(path: str) -> pa.Table:
    """Read a whole Arrow IPC stream file through FileSystems."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return pa.ipc.open_stream(pa.BufferReader(handle.read())).read_all()


def _part_rows(batch: pa.RecordBatch, seq_len: int) -> PartRows:
    return PartRows(ids=fixed_list_to_numpy(batch.column(INPUT_IDS), seq_len),
                    lengths=array_to_numpy(batch.column(PART_LENGTH)),
                    seeds=array_to_numpy(batch.column(MASK_SEED)))


def read_part_rows(path: str, seq_len: int, start: int, stop: int) -> Iterator[PartRows]:
    """Rows [start, stop) of a part, a record batch at a time: only the batches holding them are
    read, so a part of any size is gathered in bounded memory."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        reader = pa.ipc.open_file(pa.PythonFile(handle, mode="r"))
        offset = 0
        for index in range(reader.num_record_batches):
            if offset >= stop:
                return
            # Every batch but the last holds ROWS_PER_RECORD_BATCH rows: skip whole ones unread.
            if index < reader.num_record_batches - 1 and offset + ROWS_PER_RECORD_BATCH <= start:
                offset += ROWS_PER_RECORD_BATCH
                continue
            batch = reader.get_batch(index)
            low, high = max(start - offset, 0), min(stop - offset, batch.num_rows)
            if high > low:
                yield _part_rows(batch.slice(low, high - low), seq_len)
            offset += batch.num_rows


REMOTE_PARTS_OPEN = 64
MAX_LOCAL_PARTS_OPEN = 4096


class _Mapped:
    """A local part memory-mapped with its file closed (a mapping holds no file descriptor). After
    each read its pages are given back (`release`): they stay in the page cache, but not in the
    process' resident set, which held 2.5 GB of mapped parts at a million inputs with every part open."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as handle:
            self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def release(self) -> None:
        if hasattr(self.map, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self.map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # rows handed out still view it: it goes with them
            self.map.close()


class PartReaders:
    """Open parts, kept for the slices of one shard: a group's part holds the rows of many inputs,
    whose slices come in content-key order, so each part is opened once, not once per input. A
    local part is memory-mapped (a batch costs only the pages of the rows taken, given back after
    each read: `_Mapped`); a remote part keeps its handle and its last batch read. At most
    `max_open` parts are held (least recently used closed first): by default `REMOTE_PARTS_OPEN`
    remote ones (each handle has a read buffer) and MAX_LOCAL_PARTS_OPEN local ones. A shard's
    inputs come in content-key order, from every group's part: at a
    million inputs (1,000 groups), 64 open parts meant a reopen for 94% of the slices, and ~13
    minutes of the run."""

    def __init__(self, max_open: int | None = None) -> None:
        self._open: dict[str, tuple[object, pa.ipc.RecordBatchFileReader, list[int]]] = {}
        self._last: dict[str, tuple[int, pa.RecordBatch]] = {}
        self._max_open = max_open

    def _reader(self, path: str) -> tuple[pa.ipc.RecordBatchFileReader, list[int]]:
        if path in self._open:
            self._open[path] = self._open.pop(path)  # most recently used last
        else:
            local = "://" not in path or path.startswith("file://")
            if self._max_open is None:
                self._max_open = MAX_LOCAL_PARTS_OPEN if local else REMOTE_PARTS_OPEN
            if len(self._open) >= self._max_open:
                oldest = next(iter(self._open))
                self._open.pop(oldest)[0].close()
                self._last.pop(oldest, None)
            if local:
                handle = _Mapped(path.removeprefix("file://"))
                reader = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(handle.map)))
            else:
                handle = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
                reader = pa.ipc.open_file(pa.PythonFile(handle, mode="r"))
            starts = [index * ROWS_PER_RECORD_BATCH for index in range(reader.num_record_batches)]
            self._open[path] = (handle, reader, starts)
        _, reader, starts = self._open[path]
        return reader, starts

    def _batch(self, path: str, reader: pa.ipc.RecordBatchFileReader, index: int) -> pa.RecordBatch:
        last = self._last.get(path)
        if last is None or last[0] != index:
            last = self._last[path] = (index, reader.get_batch(index))
        return last[1]

    def rows(self, path: str, seq_len: int, start: int, stop: int) -> Iterator[PartRows]:
        """Rows [start, stop) of a part, a record batch at a time (`read_part_rows`' rows)."""
        reader, starts = self._reader(path)
        try:
            # Every batch but the last holds ROWS_PER_RECORD_BATCH rows.
            for index in range(min(start // ROWS_PER_RECORD_BATCH, len(starts)), len(starts)):
                offset = starts[index]
                if offset >= stop:
                    return
                batch = self._batch(path, reader, index)
                low, high = max(start - offset, 0), min(stop - offset, batch.num_rows)
                if high > low:
                    yield _part_rows(batch.slice(low, high - low), seq_len)
        finally:
            handle = self._open[path][0] if path in self._open else None
            if isinstance(handle, _Mapped):
                handle.release()

    def close(self) -> None:
        handles = [handle for handle, _, _ in self._open.values()]
        self._open.clear()
        self._last.clear()
        for handle in handles:
            handle.close()

    def __enter__(self) -> PartReaders:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_part(path: str, seq_len: int) -> PartRows:
    """A whole part (small ones: tests and tools)."""
    pieces = list(read_part_rows(path, seq_len, 0, 2**62))
    if not pieces:
        return PartRows(np.zeros((0, seq_len), np.int32), np.zeros(0, np.int32), np.zeros(0, np.uint64))
    return PartRows(np.concatenate([p.ids for p in pieces]), np.concatenate([p.lengths for p in pieces]),
                    np.concatenate([p.seeds for p in pieces]))
