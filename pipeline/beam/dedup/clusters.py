"""The near-duplicate clusters found from their edges (pairs at or above --near_dedup) in memory
that does not grow with the members: the names sorted on local disk, the union-find over their
ranks in memory maps of files.

The step held each member's name and signature place in two dicts (~250 bytes a member, and what
Python's allocator kept of it after): 100 MB for 400,000 near copies. Here, in a scratch folder of
the local disk that goes with the step:

1. each edge gives its two ends as records (name, slot: 2 x its number + 0 or 1), written in sorted
   chunks of at most CHUNK_RECORDS (`pair_spills.write_keys`);
2. the chunks merged (MERGE_FAN_IN at a time: in rounds where there are more) give the names in
   order, each once: a member's rank is its id. Each name is written with its signature's place to
   the members' file (an offset each to a file of offsets), and its id to its slots in the ends'
   map (2 x 4 bytes an edge);
3. `kernels.common.union_find` joins the ends: each id's root is the smallest id of its component,
   the earliest path, whatever the edges' order;
4. the members' file read in order gives (member, root, their places) for each member but its
   root, the root's record read from where its offset says (the last root read is kept).

What stays in memory: a chunk of records, a block of each chunk's file during the merge, and the
pages of the maps the kernel touches (file pages, which the system can write back and reuse).
"""

from __future__ import annotations

import heapq
import os
import struct
import tempfile
from collections.abc import Iterable, Iterator

import numpy as np

from pipeline.beam.dedup.pair_spills import MERGE_FAN_IN, encode_name, merged_rounds, read_keys, write_keys
from pipeline.kernels.common.union_find import smallest_roots

__all__ = ["CHUNK_RECORDS", "cluster_members"]

CHUNK_RECORDS = 1 << 16  # ends held before they are sorted and written: ~25 MB at 40-byte paths
_SLOT = 8  # bytes of an end's slot, big-endian: records of one name sort by slot
_MEMBER = struct.Struct("<HB")  # a member's record: its name's length in bytes, its signature's place
_ID = np.dtype("<u4")
_OFFSET = np.dtype("<u8")
_MAP_ROWS = 1 << 16  # ids written to a map at a time


class TooManyMembers(ValueError):
    """More cluster members than a 32-bit id counts."""



def _spill_ends(edges: Iterable[tuple[str, str, int, int]], scratch: str, chunk: int) -> tuple[list, int]:
    """Step 1: the chunk files of the edges' ends; (their slices, the number of edges)."""
    pieces, held, edges_seen = [], [], 0
    for a, b, place_a, place_b in edges:
        slot = 2 * edges_seen
        held.append((encode_name(a), slot.to_bytes(_SLOT, "big"), place_a, 0))
        held.append((encode_name(b), (slot + 1).to_bytes(_SLOT, "big"), place_b, 0))
        edges_seen += 1
        if len(held) >= chunk:
            held.sort()
            pieces.append(write_keys(os.path.join(scratch, f"ends-{len(pieces):05d}.bin"), held))
            held = []
    if held:
        held.sort()
        pieces.append(write_keys(os.path.join(scratch, f"ends-{len(pieces):05d}.bin"), held))
    return pieces, edges_seen


def _map(path: str, dtype: np.dtype, count: int) -> np.ndarray:
    """A writable memory map of `count` items of a new file (one item when `count` is 0: a map
    cannot be empty; the callers look at the first `count` only)."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(max(count, 1),))


def _name_members(pieces: list, edges: int, scratch: str) -> tuple[np.ndarray, int]:
    """Step 2: the members' file and its offsets, and the ends' map (edges, 2) of their ids."""
    ends = _map(os.path.join(scratch, "ends.npy"), _ID, 2 * edges)
    count, previous = 0, None
    written = 0
    with open(os.path.join(scratch, "members.bin"), "wb") as members, \
            open(os.path.join(scratch, "offsets.bin"), "wb") as offsets:
        slots, ids = [], []
        for name, slot, place, _ in heapq.merge(*(read_keys(piece) for piece in pieces)):
            if name != previous:
                if count == 0xFFFFFFFF:
                    raise TooManyMembers("more than 4,294,967,295 near-duplicate cluster members: the clusters' "
                                         "ids are 32-bit")
                offsets.write(written.to_bytes(8, "little"))
                record = _MEMBER.pack(len(name), place) + name
                members.write(record)
                written += len(record)
                previous, count = name, count + 1
            slots.append(int.from_bytes(slot, "big"))
            ids.append(count - 1)
            if len(slots) >= _MAP_ROWS:
                ends[slots] = ids
                slots, ids = [], []
        if slots:
            ends[slots] = ids
        offsets.write(written.to_bytes(8, "little"))
    ends.flush()
    return ends[:2 * edges].reshape(edges, 2), count


def _read_member(members, offsets: np.ndarray, i: int) -> tuple[str, int]:
    members.seek(int(offsets[i]))
    length, place = _MEMBER.unpack(members.read(_MEMBER.size))
    return members.read(length).decode("utf-8", "surrogatepass"), place


def _members_in_order(scratch: str, count: int) -> Iterator[tuple[str, int]]:
    with open(os.path.join(scratch, "members.bin"), "rb", buffering=1 << 16) as members:
        for _ in range(count):
            length, place = _MEMBER.unpack(members.read(_MEMBER.size))
            yield members.read(length).decode("utf-8", "surrogatepass"), place


def cluster_members(edges: Iterable[tuple[str, str, int, int]], chunk: int = CHUNK_RECORDS,
                    scratch_parent: str | None = None, fan_in: int = MERGE_FAN_IN
                    ) -> Iterator[tuple[str, str, int, int]]:
    """(member, root, their places) for every member of a cluster of `edges` (earlier, later, their
    signatures' places: each edge joins two inputs, in any order) but its root, the earliest by
    path (names compared as UTF-8 bytes, which order as the code points do), in the members'
    order. Holds no member: see the module's docstring.

    `scratch_parent`: where the scratch folder goes (the system's temp folder by default)."""
    with tempfile.TemporaryDirectory(prefix="maskbeam-clusters-", dir=scratch_parent) as scratch:
        pieces, edge_count = _spill_ends(edges, scratch, chunk)
        if not edge_count:
            return
        pieces = merged_rounds(pieces, scratch, fan_in)
        ends, count = _name_members(pieces, edge_count, scratch)
        for piece in pieces:
            os.remove(piece.path)  # the rounds' files (or the chunks): all under `scratch`
        parent = _map(os.path.join(scratch, "parent.npy"), _ID, count)
        parent[:count] = np.arange(count, dtype=_ID)
        smallest_roots(np.asarray(parent[:count]), np.asarray(ends))  # the maps' arrays, for the kernel
        del ends
        offsets = np.fromfile(os.path.join(scratch, "offsets.bin"), dtype=_OFFSET) if count < _MAP_ROWS else \
            np.memmap(os.path.join(scratch, "offsets.bin"), dtype=_OFFSET, mode="r")
        root_at, root = -1, ("", 0)
        with open(os.path.join(scratch, "members.bin"), "rb") as members:
            for i, (name, place) in enumerate(_members_in_order(scratch, count)):
                kept = int(parent[i])
                if kept == i:
                    continue
                if kept != root_at:
                    root_at, root = kept, _read_member(members, offsets, kept)
                yield name, root[0], place, root[1]
        del parent, offsets
