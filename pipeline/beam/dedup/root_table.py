"""The roots of the near-duplicate clusters (member -> (its cluster's root, their similarity)) as one
packed, sorted table in a file of the temp folder, which the end of the job's bucket tasks look
their inputs up in: only its reference (path and digest) is their side input.

As `beam.pvalue.AsDict` of (member, (root, similarity)) tuples, Beam's local runner held the encoded
list, and each bundle's worker decoded it into a dict of its own. Packed: the members' names (UTF-8,
sorted), each one's root (an index into the roots' names, each once) and similarity, 20 bytes and
the name a dropped input; one copy a process (the last table read), the lookups a binary search."""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.writing.arrow_io import write_bytes

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


def _names(blob: memoryview, offsets: np.ndarray, i: int) -> bytes:
    return bytes(blob[int(offsets[i]):int(offsets[i + 1])])


def pack_roots(entries: Iterable[tuple[str, tuple[str, float]]]) -> bytes:
    """(member, (root, similarity)) pairs (each member once) as one packed table. Entries in order
    (as `near.cluster_members` gives them) are packed as they come, ~20 bytes and the name's held
    a member; others are sorted first."""
    members, offsets, root_of, similarities = bytearray(), array("Q", [0]), array("I"), array("d")
    root_index: dict[bytes, int] = {}
    previous: bytes | None = None
    entries = iter(entries)
    for member, (root, similarity) in entries:
        name = member.encode("utf-8", "surrogatepass")
        if previous is not None and name <= previous:
            if name == previous:
                raise ValueError(f"{member} has two roots: a member belongs to one cluster")
            held = [*_unpacked(members, offsets, root_of, similarities, root_index), (member, (root, similarity)),
                    *entries]
            return pack_roots(sorted(held, key=lambda entry: entry[0].encode("utf-8", "surrogatepass")))
        previous = name
        members += name
        offsets.append(len(members))
        root_of.append(root_index.setdefault(root.encode("utf-8", "surrogatepass"), len(root_index)))
        similarities.append(similarity)
    roots = sorted(root_index)  # the roots' names in order, each once
    renumber = np.zeros(len(roots), dtype=_INDEX)
    renumber[[root_index[root] for root in roots]] = np.arange(len(roots))
    root_offsets = np.cumsum([0] + [len(root) for root in roots], dtype=np.int64).astype(_OFFSET)
    return b"".join([_HEAD.pack(len(root_of), len(roots), len(members), sum(map(len, roots))),
                     np.frombuffer(offsets, dtype=np.uint64).astype(_OFFSET).tobytes(), root_offsets.tobytes(),
                     renumber[np.frombuffer(root_of, dtype=np.uint32)].astype(_INDEX).tobytes(),
                     np.frombuffer(similarities, dtype=np.float64).astype(_SIMILARITY).tobytes(),
                     bytes(members), b"".join(roots)])


def _unpacked(members: bytearray, offsets: array, root_of: array, similarities: array,
              root_index: dict[bytes, int]) -> list[tuple[str, tuple[str, float]]]:
    """The entries packed so far, as they came (a table whose entries turned out of order)."""
    roots = {i: root.decode("utf-8", "surrogatepass") for root, i in root_index.items()}
    return [(bytes(members[offsets[i]:offsets[i + 1]]).decode("utf-8", "surrogatepass"),
             (roots[root_of[i]], similarities[i])) for i in range(len(root_of))]


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
        view = memoryview(blob)  # the names stay in `blob`, not copied beside it
        self._members = view[starts[4]:starts[5]]
        self._roots = view[starts[5]:starts[6]]

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
    write_bytes(path, blob)
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
