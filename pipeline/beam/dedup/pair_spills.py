"""The near-duplicate candidate pairs kept once by a merge of sorted files, not by a shuffle.

Each MinHash band partition pairs the members of its shared bands (`band_packs`); the copies of one
content's near duplicates share nearly all their bands, so each partition (~30 of 32) makes the same
pair (first, other) again: `beam.Distinct` kept each pair once, but Beam's local runner held every
partition's copy of every pair in its grouping buffer (188,265 elements for the 2,999 pairs of 3,000
near copies: `tests/beam/test_many_inputs.py`). Here a
partition writes its pairs to the temp folder in sorted chunks of at most SPILL_PAIRS distinct pairs
(`spill_partition_pairs`), each chunk cut into PAIR_BUCKETS slices by a hash of the pair; only the
slices' references go through the shuffle, grouped by bucket, and a bucket's slices are merged a
block of each at a time, each pair given once (`unique_pairs`). What any step holds: one chunk, or
one block of each of MERGE_FAN_IN slices (a bucket of more slices is merged in rounds on local disk
first, `merged_rounds`). Every file is written whole or not at all under its name
(`arrow_io.write_chunks`): a step run again while another reads its files (Beam's Dask runner
computes a side input's steps anew) never shows a part of one.

The pairs are the same as `beam.Distinct` gave whatever the workers, chunks or order: a pair's
bucket depends on the pair alone, and the merge drops every repeat within a bucket.
"""

from __future__ import annotations

import heapq
import os
import posixpath
import struct
import tempfile
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.dedup.band_packs import iter_pairs_in_partition
from pipeline.beam.writing.arrow_io import write_chunks

__all__ = ["PAIR_BUCKETS", "SPILL_PAIRS", "PairSlice", "pair_bucket", "spill_pairs", "spill_partition_pairs",
           "unique_pairs", "write_pair_file", "write_keys", "read_pairs", "read_keys", "merged_rounds", "encode_name"]

PAIR_BUCKETS = 32  # merge tasks: each holds a block of each of its slices
MERGE_FAN_IN = 32  # files `merged_rounds` merges at once (a block of each held)
SPILL_PAIRS = 1 << 16  # distinct pairs a partition holds before writing them: ~20 MB at 40-byte paths
_BLOCK = 1 << 16  # bytes read of a slice at a time
_HEADER = struct.Struct("<HHBB")  # a record: the two names' lengths in bytes, their signatures' places
Pair = tuple[str, str, int, int]  # (earlier input, later input, earlier's signature place, later's)
_Key = tuple[bytes, bytes, int, int]  # a pair with its names as UTF-8: what the chunks sort and merge by


class PairFileChanged(OSError):
    """A spilled slice of pairs is not what the job wrote (its temp folder changed while it ran)."""


@dataclass(frozen=True)
class PairSlice:
    """One bucket's pairs of one chunk: `length` bytes at `offset` of a file of the temp folder."""

    path: str
    offset: int
    length: int
    crc: int = 0  # zlib.crc32 of its bytes, checked when it has been read


def encode_name(name: str) -> bytes:
    """A name as the pair files hold it: UTF-8, lone surrogates kept, ordered as the code points are."""
    return name.encode("utf-8", "surrogatepass")


def pair_bucket(a: bytes, b: bytes) -> int:
    """The bucket of a pair (names as UTF-8): a hash of both, the same in every process."""
    return zlib.crc32(b, zlib.crc32(a + b"\0")) % PAIR_BUCKETS


def _record(key: _Key) -> bytes:
    a, b, place_a, place_b = key
    return _HEADER.pack(len(a), len(b), place_a, place_b) + a + b


def _write_chunk(keys: set[_Key], path: str) -> list[tuple[int, PairSlice]]:
    """Write one chunk's pairs sorted, bucket after bucket; (bucket, its slice) of each bucket it has."""
    by_bucket: dict[int, list[_Key]] = {}
    for key in keys:
        by_bucket.setdefault(pair_bucket(key[0], key[1]), []).append(key)
    out, offset, blocks = [], 0, []
    for bucket in sorted(by_bucket):
        data = b"".join(_record(key) for key in sorted(by_bucket[bucket]))
        blocks.append(data)
        out.append((bucket, PairSlice(path, offset, len(data), zlib.crc32(data))))
        offset += len(data)
    write_chunks(path, blocks)
    return out


def spill_pairs(pairs: Iterable[Pair], stem: str, chunk_pairs: int = SPILL_PAIRS) -> Iterator[tuple[int, PairSlice]]:
    """Write `pairs` to files `stem`-<this call's id>-NNNNN.bin, a chunk of at most `chunk_pairs`
    distinct pairs each; (bucket, slice) of every bucket of every chunk. A slice names the file its
    own call wrote: a partition paired again (a retry, or a side input's steps computed anew on
    Dask), whose values may come in another order and cut other chunks, writes files of its own."""
    chunk: set[_Key] = set()
    index = 0
    stem = f"{stem}-{uuid.uuid4().hex[:12]}"  # this call's own files: a run of it again writes others
    for a, b, place_a, place_b in pairs:
        chunk.add((encode_name(a), encode_name(b), place_a, place_b))
        if len(chunk) >= chunk_pairs:
            yield from _write_chunk(chunk, f"{stem}-{index:05d}.bin")
            index += 1
            chunk = set()
    if chunk:
        yield from _write_chunk(chunk, f"{stem}-{index:05d}.bin")


def write_pair_file(path: str, pairs: Iterable[Pair]) -> PairSlice:
    """Write `pairs` (each once) sorted to `path`; the slice of the whole file."""
    return write_keys(path, sorted((encode_name(a), encode_name(b), place_a, place_b)
                                   for a, b, place_a, place_b in pairs))


def write_keys(path: str, keys: Iterable[_Key]) -> PairSlice:
    """Write pair records of `keys` (names as UTF-8, as `read_keys` gives them) in their order to
    `path`, a block at a time (`keys` may be a merge of files: it is never held); the slice of the
    whole file."""
    length = crc = 0

    def blocks() -> Iterator[bytes]:
        nonlocal length, crc
        block = bytearray()
        for key in keys:
            block += _record(key)
            if len(block) >= _BLOCK:
                length, crc = length + len(block), zlib.crc32(block, crc)
                yield bytes(block)
                block = bytearray()
        length, crc = length + len(block), zlib.crc32(block, crc)
        yield bytes(block)

    write_chunks(path, blocks())
    return PairSlice(path, 0, length, crc)


def read_pairs(piece: PairSlice) -> Iterator[Pair]:
    """The pairs of one slice, read a block at a time."""
    for key in read_keys(piece):
        yield _decoded(key, [piece])


def partition_stem(temp_dir: str, partition: int) -> str:
    """Where a band partition's pairs go (one shuffle key a partition: no two writers of one name)."""
    return posixpath.join(temp_dir, f"pairs-{partition:03d}")


def read_keys(piece: PairSlice) -> Iterator[_Key]:
    """The pairs of one slice in its (sorted) order, names as UTF-8 bytes, read a block at a time:
    from the file's raw stream, as an object store's reader buffers 16 MB a file and a merge has a
    slice of every partition open (each block a ranged read of its own size there).

    Raises:
        PairFileChanged: the slice ends early or its bytes are not the ones written (its crc).
    """
    with FileSystems.open(piece.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.seek(piece.offset)
        raw = getattr(handle, "raw", handle)
        left, buffer, start, crc = piece.length, b"", 0, 0
        while True:
            if len(buffer) - start >= _HEADER.size:
                len_a, len_b, place_a, place_b = _HEADER.unpack_from(buffer, start)
                names = start + _HEADER.size
                stop = names + len_a + len_b
                if stop <= len(buffer):
                    start = stop
                    yield buffer[names:names + len_a], buffer[names + len_a:stop], place_a, place_b
                    continue
            block = raw.read(min(_BLOCK, left)) if left else b""
            if not block:
                break
            left -= len(block)
            crc = zlib.crc32(block, crc)
            buffer, start = buffer[start:] + block, 0
    if left or start != len(buffer):
        raise PairFileChanged(f"{piece.path} ends inside the {piece.length} bytes of candidate pairs at "
                              f"{piece.offset}: was the temp folder changed during the run?")
    if piece.crc and crc != piece.crc:
        raise PairFileChanged(f"{piece.path} holds other bytes than the candidate pairs written at {piece.offset} "
                              f"(crc32 differs): was the temp folder changed during the run?")


def spill_partition_pairs(partition_and_packs: tuple[int, Iterable], temp_dir: str,
                          more: Iterable[tuple[int, bytes]] = ()) -> Iterator[tuple[int, PairSlice]]:
    """The candidate pairs of one band partition (`band_packs.iter_pairs_in_partition`) spilled:
    (bucket, slice) of each of its chunks' buckets."""
    return spill_pairs(iter_pairs_in_partition(partition_and_packs, more),
                       partition_stem(temp_dir, partition_and_packs[0]))


def unique_pairs(bucket_and_slices: tuple[int, Iterable[PairSlice]]) -> Iterator[Pair]:
    """Every pair of one bucket's slices once, in order (their merge, repeats dropped; more than
    MERGE_FAN_IN slices are merged in rounds on local disk first: a block of each is held)."""
    _, slices = bucket_and_slices
    ordered = sorted(set(slices), key=lambda s: (s.path, s.offset))
    previous = None
    with tempfile.TemporaryDirectory(prefix="maskbeam-pairs-") as scratch:
        merged = merged_rounds(ordered, scratch)  # many chunks (a partition's pairs ~ its inputs): in rounds
        for key in heapq.merge(*(read_keys(piece) for piece in merged)):
            if key != previous:
                previous = key
                yield _decoded(key, ordered)


def merged_rounds(pieces: list[PairSlice], scratch: str, fan_in: int = MERGE_FAN_IN) -> list[PairSlice]:
    """Sorted `pieces` merged `fan_in` at a time into files of the local folder `scratch` until at
    most `fan_in` are left (a merge of them all then holds a block of `fan_in` files at most). A
    round's inputs under `scratch` are removed once merged; others are left where they are."""
    rounds = 0
    while len(pieces) > fan_in:
        merged = []
        for start in range(0, len(pieces), fan_in):
            group = pieces[start:start + fan_in]
            path = os.path.join(scratch, f"round-{rounds}-{len(merged):05d}.bin")
            merged.append(write_keys(path, heapq.merge(*(read_keys(piece) for piece in group))))
            for piece in group:
                if os.path.dirname(piece.path) == scratch:
                    os.remove(piece.path)
        pieces, rounds = merged, rounds + 1
    return pieces


def _decoded(key: _Key, pieces: list[PairSlice]) -> Pair:
    try:
        return key[0].decode("utf-8", "surrogatepass"), key[1].decode("utf-8", "surrogatepass"), key[2], key[3]
    except UnicodeDecodeError as error:
        raise PairFileChanged(f"a name in the candidate pairs of {sorted({p.path for p in pieces})} is not UTF-8 "
                              f"({error}): was the temp folder changed during the run?") from error
