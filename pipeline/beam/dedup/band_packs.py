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

from pipeline.kernels.text.quality import band_hashes

MAX_BAND_GROUP = 64  # a band shared by more inputs pairs each with the first only (clusters still join)
# Shuffle keys; a key's consumer holds its share (1/32) of every input's bands. At 4, a million inputs
# made two rounds of ~1.8 GB (a quarter of the bands each on two workers) the run's peak; at 32 an
# input's name is written once a partition its bands meet (~28 of 32): ~2.3 KB of temp folder an input.
BAND_PARTITIONS = 32
DIGEST_BYTES = 16  # of sha256: a collision among 10^9 inputs has a chance of ~10^-21
_HEAD = struct.Struct("<BHB")  # a member: its signature's place, its name's length in bytes, its bands here
_BAND = np.dtype("<u8")


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


def pack_bands(name: str, content: str, signature: np.ndarray, place: int) -> list[tuple[int, bytes]]:
    """(partition, packed member) for each partition holding some of the bands of `signature`."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) > 0xFFFF:
        raise ValueError(f"an input name of {len(encoded)} bytes is too long to pack (at most 65,535): "
                         f"{name[:80]}...")
    digest = content_digest(content)
    bands = np.array(band_hashes(signature), dtype=_BAND)
    partitions = bands % BAND_PARTITIONS
    out = []
    for p in np.unique(partitions):
        mine = bands[partitions == p]
        out.append((int(p), _HEAD.pack(place, len(encoded), len(mine)) + encoded + digest + mine.tobytes()))
    return out


def merged_packs(packs: Iterable[tuple[int, bytes]], every_partition: bool = False) -> list[tuple[int, bytes]]:
    """The packed members of many inputs (a group's) as one value a partition: one element each
    for the shuffle instead of one an input and partition (80,000 elements for 10,000 inputs).
    With `every_partition`, a partition without a member gets an empty value (b""): its key is in
    the shuffle whatever the inputs."""
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(BAND_PARTITIONS)} if every_partition else {}
    for partition, packed in packs:
        by_partition.setdefault(partition, []).append(packed)
    return [(partition, b"".join(members)) for partition, members in sorted(by_partition.items())]


@dataclass(frozen=True)
class BandSlice:
    """Where a worker left one partition's packed members of its group's inputs: `length` bytes at
    `offset` of a file of the temp folder (`write_band_file`). Only these references go through the
    shuffle, not the bands: Beam's local runner held every input's bands between the stages (decoded,
    and copied through its data plane: ~8 KB of memory an input for ~1 KB of bands)."""

    path: str
    offset: int
    length: int


def write_band_file(path: str, packs: Iterable[tuple[int, bytes]]) -> list[tuple[int, BandSlice | None]]:
    """The packed members of many inputs (a worker's group) merged a partition (`merged_packs`) and
    written one after the other to `path` (not written when none has a band); returns (partition,
    its slice, or None for no member) for every partition, so every partition's key is in the
    shuffle whatever the inputs. The same packs write the same file (a retry's is the same)."""
    merged = merged_packs(packs, every_partition=True)
    out: list[tuple[int, BandSlice | None]] = []
    offset = 0
    for partition, value in merged:
        out.append((partition, BandSlice(path, offset, len(value)) if value else None))
        offset += len(value)
    if offset:
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            for _, value in merged:
                handle.write(value)
    return out


def read_band_slices(values: Iterable[bytes | BandSlice | None]) -> list[bytes]:
    """The packed values behind a partition's values as the shuffle gives them: bytes as they are,
    slices read from their files (one open a file), None (no member) left out."""
    out: list[bytes] = []
    slices: dict[str, list[BandSlice]] = {}
    for value in values:
        if isinstance(value, BandSlice):
            slices.setdefault(value.path, []).append(value)
        elif value:
            out.append(value)
    for path in sorted(slices):
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            for piece in sorted(slices[path], key=lambda s: s.offset):
                handle.seek(piece.offset)
                data = handle.read(piece.length)
                if len(data) != piece.length:
                    raise OSError(f"{path} holds {len(data)} bytes at {piece.offset}, not the {piece.length} of its "
                                  f"MinHash bands: was the temp folder changed during the run?")
                out.append(data)
    return out


def _members(value: bytes) -> Iterator[tuple[int, int]]:
    """(offset, band count) of each member packed in one value."""
    offset, end = 0, len(value)
    while offset < end:
        _, length, count = _HEAD.unpack_from(value, offset)
        yield offset, count
        offset += _HEAD.size + length + DIGEST_BYTES + count * _BAND.itemsize


def unpack_member(value: bytes, offset: int = 0) -> tuple[str, bytes, int]:
    """(name, content digest, signature place) of the member packed at `offset` of a value."""
    place, length, _ = _HEAD.unpack_from(value, offset)
    start = offset + _HEAD.size
    return (value[start:start + length].decode("utf-8", "surrogatepass"),
            value[start + length:start + length + DIGEST_BYTES], place)


def pairs_in_partition(partition_and_packs: tuple[int, Iterable[bytes | BandSlice | None]],
                       more: Iterable[tuple[int, bytes]] = ()) -> list[tuple[str, str, int, int]]:
    """(earlier, later, earlier's signature place, later's) of the `candidate_pairs` of every band
    of one partition shared by two inputs or more, with the values of `more` (partition, value) of
    this partition among its members. Only the members of shared bands are unpacked."""
    partition, values = partition_and_packs
    values = [*read_band_slices(values), *(value for p, value in more if p == partition)]
    places_of: list[tuple[int, int]] = []  # (value, offset) of each member
    per_member = []
    for index, value in enumerate(values):
        for offset, count in _members(value):
            start = offset + _HEAD.size + _HEAD.unpack_from(value, offset)[1] + DIGEST_BYTES
            per_member.append(np.frombuffer(value, dtype=_BAND, count=count, offset=start))
            places_of.append((index, offset))
    if not per_member:
        return []
    bands = np.concatenate(per_member)
    owners = np.repeat(np.arange(len(per_member), dtype=np.int32), [len(b) for b in per_member])
    del per_member
    order = np.argsort(bands, kind="stable")
    bands, owners = bands[order], owners[order]
    starts = np.flatnonzero(np.r_[True, bands[1:] != bands[:-1]])
    stops = np.r_[starts[1:], len(bands)]
    shared = stops - starts >= 2
    members: dict[int, tuple[str, bytes, int]] = {}
    out = []
    for start, stop in zip(starts[shared], stops[shared]):
        band_members = []
        for owner in owners[start:stop].tolist():
            if owner not in members:
                index, offset = places_of[owner]
                members[owner] = unpack_member(values[index], offset)
            band_members.append(members[owner])
        places = {name: place for name, _, place in band_members}
        out.extend((a, b, places[a], places[b])
                   for a, b in candidate_pairs([(name, digest) for name, digest, _ in band_members]))
    return out
