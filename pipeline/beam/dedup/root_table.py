"""The roots of the near-duplicate clusters (member -> (its cluster's root, their similarity)) as one
packed, sorted table in a file of the temp folder, which the end of the job's bucket tasks look
their inputs up in: only its reference (path and digest) is their side input.

As `beam.pvalue.AsDict` of (member, (root, similarity)) tuples, Beam's local runner held the encoded
list and each bundle's worker decoded it into a dict of its own: ~1.6 KB of memory a dropped input
(80 MB at 50,000 near copies). Packed: the members' names (UTF-8, sorted), each one's root (an index
into the roots' names, each once) and similarity: ~60 bytes a dropped input on disk, one copy a task
while it runs, and the lookups a binary search."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = ["RootsRef", "RootTable", "pack_roots", "write_roots", "read_roots"]

_HEAD = struct.Struct("<QQQQ")  # members, roots, members' names' bytes, roots' names' bytes
_OFFSET = np.dtype("<u8")
_INDEX = np.dtype("<u4")
_SIMILARITY = np.dtype("<f8")  # the similarity as computed (rounded to 4 places): kept exactly


class RootTableChanged(OSError):
    """The roots' file is not the one the job wrote (its temp folder changed while it ran)."""


@dataclass(frozen=True)
class RootsRef:
    """Where the roots' table lies, and the sha256 of its bytes (what a task checks and caches by)."""

    path: str
    sha256: str


def _names(blob: bytes, offsets: np.ndarray, i: int) -> bytes:
    return blob[int(offsets[i]):int(offsets[i + 1])]


def pack_roots(entries: Iterable[tuple[str, tuple[str, float]]]) -> bytes:
    """(member, (root, similarity)) pairs (each member once) as one packed table."""
    rows = sorted((member.encode("utf-8", "surrogatepass"), root.encode("utf-8", "surrogatepass"), similarity)
                  for member, (root, similarity) in entries)
    for (a, _, _), (b, _, _) in zip(rows, rows[1:]):
        if a == b:
            raise ValueError(f"{a.decode('utf-8', 'surrogatepass')} has two roots: a member belongs to one cluster")
    roots = sorted({root for _, root, _ in rows})
    root_index = {root: i for i, root in enumerate(roots)}
    members = b"".join(member for member, _, _ in rows)
    root_names = b"".join(roots)
    member_offsets = np.cumsum([0] + [len(member) for member, _, _ in rows], dtype=np.int64).astype(_OFFSET)
    root_offsets = np.cumsum([0] + [len(root) for root in roots], dtype=np.int64).astype(_OFFSET)
    return b"".join([_HEAD.pack(len(rows), len(roots), len(members), len(root_names)),
                     member_offsets.tobytes(), root_offsets.tobytes(),
                     np.array([root_index[root] for _, root, _ in rows], dtype=_INDEX).tobytes(),
                     np.array([similarity for _, _, similarity in rows], dtype=_SIMILARITY).tobytes(),
                     members, root_names])


class RootTable(Mapping):
    """A packed table as a read-only mapping member -> (root, similarity), looked up by a binary
    search of the sorted names."""

    def __init__(self, blob: bytes, where: str = "a roots table") -> None:
        if len(blob) < _HEAD.size:
            raise RootTableChanged(f"{where} holds {len(blob)} bytes, less than its header")
        count, roots, member_bytes, root_bytes = _HEAD.unpack_from(blob)
        sizes = [(count + 1) * _OFFSET.itemsize, (roots + 1) * _OFFSET.itemsize, count * _INDEX.itemsize,
                 count * _SIMILARITY.itemsize, member_bytes, root_bytes]
        if _HEAD.size + sum(sizes) != len(blob):
            raise RootTableChanged(f"{where} holds {len(blob)} bytes, not the {_HEAD.size + sum(sizes)} its header "
                                   f"says: was the temp folder changed during the run?")
        starts = np.cumsum([_HEAD.size] + sizes).tolist()
        self._count = count
        self._member_offsets = np.frombuffer(blob, _OFFSET, count + 1, starts[0])
        self._root_offsets = np.frombuffer(blob, _OFFSET, roots + 1, starts[1])
        self._root_of = np.frombuffer(blob, _INDEX, count, starts[2])
        self._similarity = np.frombuffer(blob, _SIMILARITY, count, starts[3])
        self._members = blob[starts[4]:starts[5]]
        self._roots = blob[starts[5]:starts[6]]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return (_names(self._members, self._member_offsets, i).decode("utf-8", "surrogatepass")
                for i in range(self._count))

    def __getitem__(self, member: str) -> tuple[str, float]:
        found = self.get(member)
        if found is None:
            raise KeyError(member)
        return found

    def get(self, member: str, default=None) -> tuple[str, float] | None:
        if not isinstance(member, str):
            return default
        key = member.encode("utf-8", "surrogatepass")
        lo, hi = 0, self._count
        while lo < hi:  # the first member >= key
            mid = (lo + hi) // 2
            if _names(self._members, self._member_offsets, mid) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == self._count or _names(self._members, self._member_offsets, lo) != key:
            return default
        root = _names(self._roots, self._root_offsets, int(self._root_of[lo])).decode("utf-8", "surrogatepass")
        return root, float(self._similarity[lo])


def write_roots(path: str, entries: Iterable[tuple[str, tuple[str, float]]]) -> RootsRef:
    blob = pack_roots(entries)
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(blob)
    return RootsRef(path, hashlib.sha256(blob).hexdigest())


_READ: dict[str, RootTable] = {}  # the last table read in this process, by its digest


def read_roots(ref: RootsRef | None) -> RootTable | None:
    """The table `ref` names (the last one read is kept: a process runs many tasks of one job).

    Raises:
        RootTableChanged: its bytes are not the ones written.
    """
    if ref is None:
        return None
    table = _READ.get(ref.sha256)
    if table is None:
        with FileSystems.open(ref.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            blob = handle.read()
        if hashlib.sha256(blob).hexdigest() != ref.sha256:
            raise RootTableChanged(f"{ref.path} is not the roots' table the job wrote (sha256 differs): was the "
                                   f"temp folder changed during the run?")
        table = RootTable(blob, ref.path)
        _READ.clear()
        _READ[ref.sha256] = table
    return table
