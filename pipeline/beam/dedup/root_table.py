"""The roots of the near-duplicate clusters (member -> (its cluster's root, their similarity)) as one
sorted table in a file of the temp folder, which the end of the job's bucket tasks look their inputs
up in: only its reference (path and digest) is their side input.

As `beam.pvalue.AsDict` of (member, (root, similarity)) tuples, Beam's local runner held the encoded
list, and each bundle's worker decoded it into a dict of its own; read into each process's memory,
the packed table still cost 20 bytes and the name a dropped input in each. Now the table is written
as its entries come (in order, from `clusters.cluster_members`; nothing held but a block) and each
process maps it (`mmap`) instead of reading it: its pages are the page cache's, shared by the
processes, and the system drops them under pressure. A table on an object store is first copied to
the local temp folder, once a process. A lookup is a binary search of the sorted names.

The file: a header (entries, bytes of the records), an offset an entry (uint64, into the records),
then the records in the members' order: the name's and the root's lengths, the similarity (float64,
as computed, rounded to 4 places) and the two names (UTF-8).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.writing.arrow_io import write_chunks

__all__ = ["RootsRef", "RootTable", "RootTableChanged", "pack_roots", "write_roots", "read_roots"]

_HEAD = struct.Struct("<QQ")  # entries, bytes of the records
_RECORD = struct.Struct("<IId")  # the member's name's length, the root's, the similarity (as computed)
_OFFSET = np.dtype("<u8")
_BLOCK = 1 << 20  # bytes copied at a time


class RootTableChanged(OSError):
    """The roots' file is not the one the job wrote (its temp folder changed while it ran)."""


@dataclass(frozen=True)
class RootsRef:
    """Where the roots' table lies, and the sha256 of its bytes (what a task checks and caches by)."""

    path: str
    sha256: str


def _encoded(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")  # orders as the code points do


def _blocks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            yield block


def _table_chunks(entries: Iterable[tuple[str, tuple[str, float]]]) -> Iterator[bytes]:
    """The table's bytes, a block at a time: the entries (in order of their members, each once) go
    to two files of a local scratch folder as they come, then the header and the two files."""
    with tempfile.TemporaryDirectory(prefix="maskbeam-roots-") as scratch:
        offsets_path, records_path = os.path.join(scratch, "offsets"), os.path.join(scratch, "records")
        count = written = 0
        previous: bytes | None = None
        with open(offsets_path, "wb") as offsets, open(records_path, "wb") as records:
            for member, (root, similarity) in entries:
                name = _encoded(member)
                if previous is not None and name <= previous:
                    if name == previous:
                        raise ValueError(f"{member} has two roots: a member belongs to one cluster")
                    raise ValueError(f"{member} comes after {previous.decode('utf-8', 'surrogatepass')}: a roots' "
                                     f"table is written in the members' order")
                previous = name
                kept = _encoded(root)
                record = _RECORD.pack(len(name), len(kept), similarity) + name + kept
                offsets.write(written.to_bytes(_OFFSET.itemsize, "little"))
                records.write(record)
                written += len(record)
                count += 1
            offsets.write(written.to_bytes(_OFFSET.itemsize, "little"))
        yield _HEAD.pack(count, written)
        yield from _blocks(offsets_path)
        yield from _blocks(records_path)


def pack_roots(entries: Iterable[tuple[str, tuple[str, float]]]) -> bytes:
    """The table of (member, (root, similarity)) entries, in their members' order, as bytes.

    Raises:
        ValueError: a member comes twice, or out of order.
    """
    return b"".join(_table_chunks(entries))


def write_roots(path: str, entries: Iterable[tuple[str, tuple[str, float]]]) -> RootsRef:
    """Write the table of `entries` (as `pack_roots`) to `path` as they come; its reference."""
    digest = hashlib.sha256()

    def hashed() -> Iterator[bytes]:
        for chunk in _table_chunks(entries):
            digest.update(chunk)
            yield chunk

    write_chunks(path, hashed())
    return RootsRef(path, digest.hexdigest())


class RootTable(Mapping):
    """A table's bytes (any buffer: a file's map) as a read-only mapping member -> (root,
    similarity), looked up by a binary search of the sorted names."""

    def __init__(self, blob, where: str = "a roots table") -> None:
        view = memoryview(blob)
        if len(view) < _HEAD.size:
            raise RootTableChanged(f"{where} holds {len(view)} bytes, less than its header")
        count, records = _HEAD.unpack_from(view)
        expected = _HEAD.size + (count + 1) * _OFFSET.itemsize + records
        if expected != len(view):
            raise RootTableChanged(f"{where} holds {len(view)} bytes, not the {expected} its header says: was the "
                                   f"temp folder changed during the run?")
        self._count = count
        self._offsets = np.frombuffer(view, _OFFSET, count + 1, _HEAD.size)
        self._records = view[_HEAD.size + (count + 1) * _OFFSET.itemsize:]
        self._where = where

    def _entry(self, i: int) -> tuple[bytes, bytes, float]:
        at = int(self._offsets[i])
        name_length, root_length, similarity = _RECORD.unpack_from(self._records, at)
        name = at + _RECORD.size
        root = name + name_length
        if root + root_length > int(self._offsets[i + 1]):
            raise RootTableChanged(f"{self._where}: entry {i} runs past the next: was the temp folder changed "
                                   f"during the run?")
        return bytes(self._records[name:root]), bytes(self._records[root:root + root_length]), similarity

    def _name(self, i: int) -> bytes:
        at = int(self._offsets[i])
        (name_length,) = struct.unpack_from("<I", self._records, at)
        return bytes(self._records[at + _RECORD.size:at + _RECORD.size + name_length])

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return (self._name(i).decode("utf-8", "surrogatepass") for i in range(self._count))

    def __getitem__(self, member: str) -> tuple[str, float]:
        found = self.get(member)
        if found is None:
            raise KeyError(member)
        return found

    def get(self, member: str, default=None) -> tuple[str, float] | None:
        if not isinstance(member, str):
            return default
        key = _encoded(member)
        lo, hi = 0, self._count
        while lo < hi:  # the first member >= key
            mid = (lo + hi) // 2
            if self._name(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == self._count:
            return default
        name, root, similarity = self._entry(lo)
        if name != key:
            return default
        return root.decode("utf-8", "surrogatepass"), similarity


_READ: dict[str, RootTable] = {}  # the last tables mapped in this process, by their digests
_KEPT = 2  # a job's two tables: --dedup's twins and the roots


def _local_file(path: str) -> str | None:
    """`path` as a local file's path, or None for an object store's."""
    scheme = FileSystems.get_scheme(path)
    if scheme is None:
        return path
    if scheme == "file":
        return path[len("file://"):]
    return None


def _mapped(path: str) -> mmap.mmap:
    """The read-only map of the table at `path`; a copy in the local temp folder first where it is
    an object store's (the copy's name is removed once mapped: the map keeps its pages)."""
    local = _local_file(path)
    if local is not None:
        with open(local, "rb") as handle:
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    with tempfile.NamedTemporaryFile(prefix="maskbeam-roots-", suffix=".bin") as copy:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as source:
            shutil.copyfileobj(source, copy, _BLOCK)
        copy.flush()
        return mmap.mmap(copy.fileno(), 0, access=mmap.ACCESS_READ)


def read_roots(ref: RootsRef | None) -> RootTable | None:
    """The table `ref` names, mapped (the last two are kept: a process runs many tasks of one job).

    Raises:
        RootTableChanged: its bytes are not the ones written.
    """
    if ref is None:
        return None
    table = _READ.get(ref.sha256)
    if table is None:
        try:
            blob = _mapped(ref.path)
        except ValueError as error:  # an empty file cannot be mapped
            raise RootTableChanged(f"{ref.path} is not the roots' table the job wrote ({error}): was the temp "
                                   f"folder changed during the run?") from error
        if hashlib.sha256(blob).hexdigest() != ref.sha256:
            raise RootTableChanged(f"{ref.path} is not the roots' table the job wrote (sha256 differs): was the "
                                   f"temp folder changed during the run?")
        table = RootTable(blob, ref.path)
        while len(_READ) >= _KEPT:
            del _READ[next(iter(_READ))]
        _READ[ref.sha256] = table
    return table
