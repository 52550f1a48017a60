"""An input's MinHash bands packed for the shuffle that finds near-duplicate candidates.

The bands of one input go to BAND_PARTITIONS shuffle keys (a band's key is its hash modulo that, so
equal bands meet under one key); under each key the input is one packed member: its signature's
place (`signatures`), its name, a digest of its content keys (equal digests: exact duplicates, never
candidates) and its bands there as little-endian uint64; a worker joins the members of its group of
small inputs into one `bytes` value a key (`merged_packs`) and writes them to a file of the temp
folder (`write_band_file`): only a reference to each key's slice of it goes through the shuffle
(`BandSlice`), and the pairing of a key reads its slices back. About 750 bytes an input on disk,
where one (band, (name, content keys)) tuple per band (64 of them, ~350 bytes each decoded) were
most of the job's memory on many small files, and the packed values in the shuffle still ~8 KB of
memory an input on the local runner. `pairs_in_partition` gives the same pairs as `candidate_pairs`
on each band's members: what `near.band_records` and a GroupByKey by band gave.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.writing.arrow_io import write_chunks
from pipeline.kernels.text.quality import band_hashes

MAX_BAND_GROUP = 64  # a band shared by more inputs pairs each with the first only (clusters still join)
# Shuffle keys; a key's consumer holds its share (1/32) of every input's bands. At 4, a million inputs
# made two rounds of ~1.8 GB (a quarter of the bands each on two workers) the run's peak; at 32 an
# input's name is written once a partition its bands meet (~28 of 32): ~2.3 KB of temp folder an input.
BAND_PARTITIONS = 32
# Bands one pass of a partition's pairing holds (12 bytes each, and the sort's ~20): a partition
# of more is paired in passes over its band files, each a share of the band hashes. At a million
# inputs a partition holds ~2 million bands: 2 passes of ~30 MB.
MAX_PAIRING_BANDS = 1 << 20
DIGEST_BYTES = 16  # of sha256: a collision among 10^9 inputs has a chance of ~10^-21
_VALUE = struct.Struct("<III")  # a value: its members, its entries, its members' bytes
_MEMBER = struct.Struct("<BH")  # a member: its signature's place, its name's length in bytes
_BAND = np.dtype("<u8")
_OWNER = np.dtype("<u4")


def candidate_pairs(members: Iterable[tuple[str, object]]) -> list[tuple[str, str]]:
    """Pairs (earlier path, later path) of the inputs sharing one band, but for exact duplicates
    (equal content keys: reported as such, never scored, and 45 pairs a band for 10 copies)."""
    content = dict(members)
    ordered = sorted(content)
    if len(ordered) > MAX_BAND_GROUP:
        pairs = [(ordered[0], other) for other in ordered[1:]]
    else:
        pairs = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]]
    return [(a, b) for a, b in pairs if content[a] != content[b]]


def content_digest(content: str) -> bytes:
    """The digest an input's content keys are compared by (`near._content`: the keys, in order)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).digest()[:DIGEST_BYTES]


def _value(members: list[bytes], bands: np.ndarray, owners: np.ndarray) -> bytes:
    """One packed value: the header, its bands, the index of each band's member, then the members."""
    table = b"".join(members)
    return (_VALUE.pack(len(members), len(bands), len(table)) + bands.astype(_BAND, copy=False).tobytes()
            + owners.astype(_OWNER, copy=False).tobytes() + table)


def pack_bands(name: str, content: str, signature: np.ndarray, place: int) -> list[tuple[int, bytes]]:
    """(partition, packed value of this one member) for each partition holding some of the bands of
    `signature`."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) > 0xFFFF:
        raise ValueError(f"an input name of {len(encoded)} bytes is too long to pack (at most 65,535): "
                         f"{name[:80]}...")
    member = _MEMBER.pack(place, len(encoded)) + encoded + content_digest(content)
    bands = np.array(band_hashes(signature), dtype=_BAND)
    partitions = bands % BAND_PARTITIONS
    out = []
    for p in np.unique(partitions):
        mine = bands[partitions == p]
        out.append((int(p), _value([member], mine, np.zeros(len(mine), _OWNER))))
    return out


def _entries(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(bands, the index of each band's member) of one packed value: views, nothing copied."""
    _, entries, _ = _VALUE.unpack_from(value)
    return (np.frombuffer(value, dtype=_BAND, count=entries, offset=_VALUE.size),
            np.frombuffer(value, dtype=_OWNER, count=entries, offset=_VALUE.size + entries * _BAND.itemsize))


def _table_start(entries: int) -> int:
    return _VALUE.size + entries * (_BAND.itemsize + _OWNER.itemsize)


def _split_table(table: bytes, count: int, where: str = "a packed value") -> list[bytes]:
    """The packed bytes of each of the `count` members one after the other in `table`.

    Raises:
        OSError: the table does not hold exactly `count` members (`where` names it).
    """
    members, start = [], 0
    for _ in range(count):
        if start + _MEMBER.size > len(table):
            break
        stop = start + _MEMBER.size + _MEMBER.unpack_from(table, start)[1] + DIGEST_BYTES
        members.append(table[start:stop])
        start = stop
    if len(members) != count or start != len(table):
        raise OSError(f"{where} does not hold the {count} members of its MinHash bands: was the temp folder changed "
                      f"during the run?")
    return members


def _members(value: bytes) -> list[bytes]:
    count, entries, length = _VALUE.unpack_from(value)
    start = _table_start(entries)
    return _split_table(value[start:start + length], count)


def unpack_member(member: bytes) -> tuple[str, bytes, int]:
    """(name, content digest, signature place) of one packed member."""
    place, length = _MEMBER.unpack_from(member)
    start = _MEMBER.size
    return (member[start:start + length].decode("utf-8", "surrogatepass"),
            member[start + length:start + length + DIGEST_BYTES], place)


def merged_packs(packs: Iterable[tuple[int, bytes]], every_partition: bool = False) -> list[tuple[int, bytes]]:
    """The packed values of many inputs (a group's) as one value a partition: one element each
    for the shuffle instead of one an input and partition (80,000 elements for 10,000 inputs).
    With `every_partition`, a partition without a member gets an empty value (b""): its key is in
    the shuffle whatever the inputs."""
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(BAND_PARTITIONS)} if every_partition else {}
    for partition, packed in packs:
        by_partition.setdefault(partition, []).append(packed)
    out = []
    for partition, values in sorted(by_partition.items()):
        members: list[bytes] = []
        bands, owners = [], []
        for value in values:
            value_bands, value_owners = _entries(value)
            bands.append(value_bands)
            owners.append(value_owners.astype(np.int64) + len(members))
            members.extend(_members(value))
        out.append((partition, _value(members, np.concatenate(bands), np.concatenate(owners)) if members else b""))
    return out


@dataclass(frozen=True)
class BandSlice:
    """Where a worker left one partition's packed members of its group's inputs: `length` bytes at
    `offset` of a file of the temp folder (`write_band_file`). Only these references go through the
    shuffle, not the bands: Beam's local runner held every input's bands between the stages (decoded,
    and copied through its data plane: ~8 KB of memory an input for ~1 KB of bands)."""

    path: str
    offset: int
    length: int
    entries: int = 0  # bands in the slice: what the pairing sizes its passes by


def write_band_file(path: str, packs: Iterable[tuple[int, bytes]]) -> list[tuple[int, BandSlice | None]]:
    """The packed members of many inputs (a worker's group) merged a partition (`merged_packs`) and
    written one after the other to `path` (not written when none has a band); returns (partition,
    its slice, or None for no member) for every partition, so every partition's key is in the
    shuffle whatever the inputs. The same packs write the same file (a retry's is the same)."""
    merged = merged_packs(packs, every_partition=True)
    out: list[tuple[int, BandSlice | None]] = []
    offset = 0
    for partition, value in merged:
        out.append((partition, BandSlice(path, offset, len(value), _VALUE.unpack_from(value)[1]) if value else None))
        offset += len(value)
    if offset:  # whole or not at all: a step run again (a side input's, on Dask) rewrites it as it is read
        write_chunks(path, (value for _, value in merged))
    return out


@dataclass(frozen=True)
class _MemberTable:
    """Where the members (names, digests, places) of one value lie: in `value` itself (in memory),
    or `length` bytes at `offset` of the band file `path`. Read only for the inputs of shared bands."""

    count: int
    value: bytes = b""
    path: str = ""
    offset: int = 0
    length: int = 0

    def members(self) -> list[bytes]:
        if not self.path:
            return _members(self.value)
        with FileSystems.open(self.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.seek(self.offset)
            return _split_table(_read_exactly(handle, self.length, self.path, self.offset), self.count,
                                f"{self.path} at {self.offset}")


def _read_exactly(handle, length: int, path: str, offset: int) -> bytes:
    data = handle.read(length)
    if len(data) != length:
        raise OSError(f"{path} holds {len(data)} bytes at {offset}, not the {length} of its MinHash bands: was the "
                      f"temp folder changed during the run?")
    return data


def _band_values(values: list[bytes | BandSlice]) -> Iterator[tuple[np.ndarray, np.ndarray, _MemberTable]]:
    """(bands, the index of each band's member, where the members lie) of each of a partition's
    values, one at a time: packed values as they are, slices read from their files (one open a
    file; each slice's bands alone, not its members)."""
    slices: dict[str, list[BandSlice]] = {}
    for value in values:
        if isinstance(value, BandSlice):
            slices.setdefault(value.path, []).append(value)
        else:
            yield (*_entries(value), _MemberTable(_VALUE.unpack_from(value)[0], value=value))
    for path in sorted(slices):
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            for piece in sorted(slices[path], key=lambda s: s.offset):
                handle.seek(piece.offset)
                count, entries, table = _VALUE.unpack(_read_exactly(handle, _VALUE.size, path, piece.offset))
                if _table_start(entries) + table != piece.length:
                    raise OSError(f"{path} holds a value of {_table_start(entries) + table} bytes at {piece.offset}, "
                                  f"not the {piece.length} of its MinHash bands: was the temp folder changed during "
                                  f"the run?")
                data = _read_exactly(handle, entries * (_BAND.itemsize + _OWNER.itemsize), path, piece.offset)
                yield (np.frombuffer(data, dtype=_BAND, count=entries),
                       np.frombuffer(data, dtype=_OWNER, count=entries, offset=entries * _BAND.itemsize),
                       _MemberTable(count, path=path, offset=piece.offset + _table_start(entries), length=table))


def _entry_count(value: bytes | BandSlice) -> int:
    return value.entries if isinstance(value, BandSlice) else _VALUE.unpack_from(value)[1]


def pairs_in_partition(partition_and_packs: tuple[int, Iterable[bytes | BandSlice | None]],
                       more: Iterable[tuple[int, bytes]] = ()) -> list[tuple[str, str, int, int]]:
    """(earlier, later, earlier's signature place, later's) of the `candidate_pairs` of every band
    of one partition shared by two inputs or more, with the values of `more` (partition, value) of
    this partition among its members. Only the bands are held for all members (12 bytes a band, and
    the sort's arrays): the members (names and digests) are read for the inputs of shared bands."""
    return list(iter_pairs_in_partition(partition_and_packs, more))


def iter_pairs_in_partition(partition_and_packs: tuple[int, Iterable[bytes | BandSlice | None]],
                            more: Iterable[tuple[int, bytes]] = ()) -> Iterator[tuple[str, str, int, int]]:
    """`pairs_in_partition`, a band at a time: the pairs of a band of many members (a content's near
    copies: one pair a copy) leave as they are made instead of in one list of the partition's."""
    partition, values = partition_and_packs
    values = [v for v in (*values, *(value for p, value in more if p == partition)) if v]
    passes = max(1, -(-sum(_entry_count(v) for v in values) // MAX_PAIRING_BANDS))
    for part in range(passes):
        yield from _pairs_in_pass(values, part, passes)


def _pairs_in_pass(values: list[bytes | BandSlice], part: int, passes: int) -> Iterator[tuple[str, str, int, int]]:
    """`pairs_in_partition` of the bands whose hash (over the partitions) is `part` modulo `passes`."""
    value_bands, value_owners, tables = [], [], []
    base = 0
    for bands, owners, table in _band_values(values):
        if len(owners) and int(owners.max()) >= table.count:
            raise OSError(f"{table.path or 'a packed value'} names a member past its {table.count}: was the temp "
                          f"folder changed during the run?")
        if passes > 1:
            mine = (bands // BAND_PARTITIONS) % passes == part
            bands, owners = bands[mine], owners[mine]
        value_bands.append(bands)
        value_owners.append(owners.astype(np.int64) + base)
        tables.append(table)
        base += table.count
    if not tables:
        return []
    bases = np.cumsum([0] + [table.count for table in tables])
    bands = np.concatenate(value_bands)
    owners = np.concatenate(value_owners)
    del value_bands, value_owners
    order = np.argsort(bands, kind="stable")
    bands, owners = bands[order], owners[order]
    del order
    starts = np.flatnonzero(np.r_[True, bands[1:] != bands[:-1]])
    stops = np.r_[starts[1:], len(bands)]
    del bands
    shared = stops - starts >= 2
    starts, stops = starts[shared], stops[shared]
    if not len(starts):
        return
    # A band of more members than MAX_BAND_GROUP (the copies of one content share every band) pairs
    # each with its first only: its members are read a value's table at a time, never held, and its
    # pairs leave as they are made; a band of the same members as one before it gives the same
    # pairs (the copies of one content share all their bands): none again.
    distinct = np.array([len(np.unique(owners[a:b])) for a, b in zip(starts.tolist(), stops.tolist())])
    large = distinct > MAX_BAND_GROUP
    small = [(a, b) for a, b in zip(starts[~large].tolist(), stops[~large].tolist())]
    needed = (np.unique(np.concatenate([owners[a:b] for a, b in small])) if small
              else np.zeros(0, dtype=np.int64))
    members = _read_members(needed, tables, bases)
    large_done: set[bytes] = set()  # the members of each large band paired so far, by a digest
    for start, stop, is_large in zip(starts.tolist(), stops.tolist(), large.tolist()):
        if is_large:
            band_owners = np.unique(owners[start:stop])
            key = hashlib.sha256(band_owners.tobytes()).digest()
            if key not in large_done:
                large_done.add(key)
                yield from _first_member_pairs(band_owners, tables, bases)
            continue
        band_members = [members[owner] for owner in owners[start:stop].tolist()]
        places = {name: place for name, _, place in band_members}
        yield from ((a, b, places[a], places[b])
                    for a, b in candidate_pairs([(name, digest) for name, digest, _ in band_members]))


def _read_members(owners: np.ndarray, tables: list[_MemberTable], bases: np.ndarray
                  ) -> dict[int, tuple[str, bytes, int]]:
    """owner -> its member (name, digest, place) of the (sorted, distinct) `owners`."""
    which = np.searchsorted(bases, owners, side="right") - 1
    members = {}
    for index in np.unique(which).tolist():
        packed = tables[index].members()
        for owner in owners[which == index].tolist():
            members[owner] = unpack_member(packed[owner - int(bases[index])])
    return members


def _first_member_pairs(owners: np.ndarray, tables: list[_MemberTable], bases: np.ndarray
                        ) -> Iterator[tuple[str, str, int, int]]:
    """`candidate_pairs` of one band of many members (sorted, distinct `owners`), in two reads of
    their tables: the first by path (names compared as UTF-8 bytes, which order as the code points
    do) and, should the members be fewer names than owners, the names; then the pairs of the first
    with every member of other content, as they are read (one input under two owners gives its pair
    twice: `FindNearDuplicateCandidates` keeps each pair once). Holds neither pairs nor members."""
    first: bytes | None = None
    names: set[bytes] | None = set()
    for member in _owner_tables(owners, tables, bases):
        name = _member_name(member)
        if first is None or name < _member_name(first):
            first = member
        if names is not None:
            names.add(name)
            if len(names) > MAX_BAND_GROUP:
                names = None
    if names is not None:  # the same inputs under several owners: few names, paired as any band
        found = {unpack_member(member)[0]: unpack_member(member) for member in _owner_tables(owners, tables, bases)}
        yield from ((a, b, found[a][2], found[b][2])
                    for a, b in candidate_pairs([(name, digest) for name, digest, _ in found.values()]))
        return
    first_name, first_digest, first_place = unpack_member(first)
    for member in _owner_tables(owners, tables, bases):
        if _member_digest(member) != first_digest:
            name, _, place = unpack_member(member)
            yield first_name, name, first_place, place


def _owner_tables(owners: np.ndarray, tables: list[_MemberTable], bases: np.ndarray) -> Iterator[bytes]:
    """The packed members of `owners`, a value's table read at a time."""
    which = np.searchsorted(bases, owners, side="right") - 1
    for index in np.unique(which).tolist():
        packed = tables[index].members()
        base = int(bases[index])
        for owner in owners[which == index].tolist():
            yield packed[owner - base]


def _member_name(member: bytes) -> bytes:
    return member[_MEMBER.size:_MEMBER.size + _MEMBER.unpack_from(member)[1]]


def _member_digest(member: bytes) -> bytes:
    start = _MEMBER.size + _MEMBER.unpack_from(member)[1]
    return member[start:start + DIGEST_BYTES]
