"""Arrow IPC stream files: the unmasked per-input parts and the final shards (temp name, then rename).

Everything goes through Beam's FileSystems, so the same code writes to local disk, GCS or S3.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.storage.arrow_files import fixed_list_array, fixed_list_to_numpy
from schemas.manifest import PARTIAL_SUFFIX
from schemas.shard import INPUT_IDS, MASK_SEED, PART_LENGTH, ROWS_PER_RECORD_BATCH, part_schema


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


def write_stream_atomically(path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> WrittenFile:
    """Write an uncompressed Arrow IPC stream to `path + .partial`, then rename it to `path`
    (object stores: straight to `path`, whose upload appears only once complete).

    A reader never sees a partial file under the final name; rewriting the same path (a retried
    bundle) replaces it with identical bytes.
    """
    temp = path + PARTIAL_SUFFIX if renames_needed(path) else path
    rows = 0
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        sink = _HashingWriter(handle)
        with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
    _publish(temp, path)
    return WrittenFile(path=path, rows=rows, bytes=sink.bytes, sha256=sink.sha256.hexdigest())


def write_text(path: str, text: str) -> None:
    """Write a small text file through FileSystems (locally: temp name, then rename)."""
    temp = path + PARTIAL_SUFFIX if renames_needed(path) else path
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(text.encode("utf-8"))
    _publish(temp, path)


def renames_needed(path: str) -> bool:
    """Local files are written under a temporary name and renamed, so a reader never sees a partial
    file under the final name. An object store's upload appears only once complete, and its
    "rename" is a copy and a delete: objects are written under their final name directly."""
    return FileSystems.get_scheme(path) in (None, "file")


def _publish(temp: str, path: str) -> None:
    if temp == path:
        return
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temp], [path])


def read_text(path: str) -> str:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read().decode("utf-8")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_part(path: str, rows: np.ndarray, lengths: np.ndarray, seeds: np.ndarray) -> WrittenFile:
    """Write unmasked rows of one input and one split. rows: (n, L); lengths: int32 (n,); seeds: uint64 (n,)."""
    schema = part_schema(rows.shape[1], rows.dtype)

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, rows.shape[0], ROWS_PER_RECORD_BATCH):
            stop = start + ROWS_PER_RECORD_BATCH
            yield pa.record_batch(
                [fixed_list_array(rows[start:stop]), pa.array(lengths[start:stop]), pa.array(seeds[start:stop])],
                schema=schema,
            )

    return write_stream_atomically(path, schema, batches())


@dataclass(frozen=True)
class PartRows:
    ids: np.ndarray  # (n, L)
    lengths: np.ndarray  # int32 (n,)
    seeds: np.ndarray  # uint64 (n,)


def read_table(path: str) -> pa.Table:
    """Read a whole Arrow IPC stream file through FileSystems."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return pa.ipc.open_stream(pa.BufferReader(handle.read())).read_all()


def read_part(path: str, seq_len: int) -> PartRows:
    table = read_table(path)
    return PartRows(
        ids=fixed_list_to_numpy(table.column(INPUT_IDS), seq_len),
        lengths=table.column(PART_LENGTH).to_numpy(),
        seeds=table.column(MASK_SEED).to_numpy(),
    )
