"""The shard plan of `sharding.plan_shards`, computed without holding every input in one place.

Rows are ordered by content key; a key's first characters (its bucket) are monotone in that order,
so the inputs of one bucket are contiguous rows. Each bucket is sorted on its own; the only global
step is a summary of the rows per bucket and split (at most 16**BUCKET_CHARS entries for hex keys,
whatever the number of inputs), from which each bucket knows where its rows start and cuts its own
pieces of the shards. A shard gathers its pieces by key: its task is as large as the shard, never
as the input list. The plan is the one `plan_shards` makes (tests compare them).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import posixpath
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.packed import allow, pack, unpack
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.arrow_io import write_bytes, write_chunks
from pipeline.beam.writing.planning import shard_count
from pipeline.beam.writing.sharding import PartSlice, ShardTask, config_key
from schemas import manifest as m

BUCKET_CHARS = 3  # 4,096 buckets of sha256 hex keys: about 250 inputs each at a million inputs


@dataclass(frozen=True)
class PlanRecord:
    """What planning needs of one input's result: its order and its parts (split -> (path, rows))."""

    key: str
    source: str
    parts: tuple[tuple[str, str, int, int], ...]  # (split, part path, rows, first row in the part)

    @property
    def sort_key(self) -> tuple[str, str]:
        return (self.key, self.source)


def plan_record(result: UnitResult) -> list[tuple[str, PlanRecord]]:
    """(bucket, record) of a result with rows; none for one without parts."""
    if not result.parts:
        return []
    parts = tuple((split, path, rows, result.part_starts.get(split, 0))
                  for split, (path, rows) in sorted(result.parts.items()))
    return [(result.key[:BUCKET_CHARS], PlanRecord(result.key, result.source, parts))]


def packed_plan_record(result: UnitResult) -> list[tuple[str, bytes]]:
    """`plan_record` with the record pickled, as it waits in the shuffle by bucket (a GroupByKey's
    values wait decoded on Beam's local runner: the bytes are a fraction of the dataclass)."""
    return [(bucket, pack((r.key, r.source, r.parts)))
            for bucket, r in plan_record(result)]


def _record(record: PlanRecord | bytes) -> PlanRecord:
    return PlanRecord(*unpack(record)) if isinstance(record, bytes) else record


def _split_parts(records: list[PlanRecord], split: str) -> list[tuple[str, int, str, int]]:
    return [(path, rows, r.key, base) for r in records for s, path, rows, base in r.parts if s == split]


def bucket_rows(bucket_and_records: tuple[str, Iterable[PlanRecord]]) -> tuple[str, dict[str, int]]:
    """(bucket, rows per split): one entry of the global summary."""
    bucket, records = bucket_and_records
    records = list(records)
    return bucket, {split: sum(rows for _, rows, _, _ in _split_parts(records, split)) for split in m.SPLITS}


@dataclass(frozen=True)
class RowSummary:
    """Where each bucket's rows start, per split, and each split's rows per copy."""

    starts: dict[str, dict[str, int]]
    per_copy: dict[str, int]


def row_summary(entries: Iterable[tuple[str, dict[str, int]]]) -> RowSummary:
    ordered = sorted(entries)
    starts: dict[str, dict[str, int]] = {split: {} for split in m.SPLITS}
    per_copy = dict.fromkeys(m.SPLITS, 0)
    for bucket, rows in ordered:
        for split in m.SPLITS:
            starts[split][bucket] = per_copy[split]
            per_copy[split] += rows[split]
    return RowSummary(starts=starts, per_copy=per_copy)


def _count(summary: RowSummary, split: str, config: PreprocessConfig, bytes_per_row: int) -> int:
    return shard_count(summary.per_copy[split] * config.copies, bytes_per_row, config.num_shards)


def shard_keys(summary: RowSummary, config: PreprocessConfig, bytes_per_row: int) -> list[tuple[tuple[str, int], int]]:
    """((split, index), count) of every shard, those without rows included."""
    out = []
    for split in m.SPLITS:
        count = _count(summary, split, config, bytes_per_row)
        out.extend(((split, index), count) for index in range(count))
    return out


def _first_shard(row: int, total: int, count: int) -> int:
    """The shard holding global row `row`: the largest i with i * total // count <= row."""
    index = min(count - 1, row * count // total)
    while index > 0 and index * total // count > row:
        index -= 1
    while index + 1 < count and (index + 1) * total // count <= row:
        index += 1
    return index


def bucket_pieces(bucket_and_records: tuple[str, Iterable[PlanRecord]], summary: RowSummary,
                  config: PreprocessConfig, bytes_per_row: int
                  ) -> list[tuple[tuple[str, int], tuple[int, tuple[PartSlice, ...]]]]:
    """((split, shard index), (global first row, slices)) of the shards this bucket's rows fall in."""
    bucket, records = bucket_and_records
    records = sorted(records, key=lambda r: r.sort_key)
    rows = bucket_rows((bucket, records))[1]
    return list(iter_bucket_pieces(bucket, rows, lambda: records, summary, config, bytes_per_row))


def iter_bucket_pieces(bucket: str, rows: dict[str, int], records: Callable[[], Iterable[PlanRecord]],
                       summary: RowSummary, config: PreprocessConfig, bytes_per_row: int
                       ) -> Iterator[tuple[tuple[str, int], tuple[int, tuple[PartSlice, ...]]]]:
    """`bucket_pieces` of a bucket of `rows` per split whose records (`records()`: sorted, read
    again for each split and copy) are streamed: one shard's piece at a time is held, whatever the
    bucket holds (the copies of one content share one)."""
    for split in m.SPLITS:
        if not rows.get(split):
            continue
        per_copy = summary.per_copy[split]
        total = per_copy * config.copies
        count = _count(summary, split, config, bytes_per_row)
        start = summary.starts[split][bucket]
        for copy in range(config.copies):
            parts = ((path, n, r.key, base) for r in records() for s, path, n, base in r.parts if s == split)
            yield from _copy_pieces(parts, split, copy * per_copy + start, rows[split], total, count, copy)


def _copy_pieces(parts: Iterable[tuple[str, int, str, int]], split: str, begin: int, rows: int, total: int,
                 count: int, copy: int) -> Iterator[tuple[tuple[str, int], tuple[int, tuple[PartSlice, ...]]]]:
    """The pieces of one copy of a bucket's rows of one split, global rows [begin, begin + rows),
    cut at the shards' bounds: a part (its rows [s, e) of the bucket's) is in a shard's piece where
    it meets the shard's rows [lo, hi) (s < hi and e > lo: a part of no rows inside a shard gives
    an empty slice, at a bound none), as `plan_shards` cuts them."""
    end = begin + rows

    def bounds(i: int) -> tuple[int, int]:
        return max(begin, i * total // count) - begin, min(end, (i + 1) * total // count) - begin

    index = _first_shard(begin, total, count)
    lo, hi = bounds(index)
    slices: list[PartSlice] = []
    position = 0
    for path, n, key, base in parts:
        s, e = position, position + n
        position = e
        while True:
            if s < hi and e > lo:
                slices.append(PartSlice(path, key, max(lo, s) - s, min(hi, e) - s, copy, base))
            if e <= hi or index + 1 >= count:
                break
            if slices:
                yield (split, index), (begin + lo, tuple(slices))
            index, slices = index + 1, []
            lo, hi = bounds(index)
    if position != rows:
        raise ValueError(f"a bucket's records hold {position} rows of {split} for the {rows} its summary has")
    if slices:
        yield (split, index), (begin + lo, tuple(slices))


SPILL_PREFIX = "plan-bucket-"  # in TEMP_DIR: one bucket's plan records, between its two reads


def _spill_path(temp_dir: str, bucket: str, kind: str = "") -> str:
    digest = hashlib.sha256("\0".join([bucket, kind]).encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return posixpath.join(temp_dir, f"{SPILL_PREFIX}{digest}.pickle")


SPILL_BLOCK = 512  # records a block of a bucket's spill file: what a reader of it holds at once
_BLOCK_HEAD = struct.Struct("<I")
_COUNT_HEAD = struct.Struct("<Q")

SpilledBucket = tuple[str, dict[str, int], tuple[str, ...]]  # (bucket, rows per split, its sorted files)


def spill_bucket(bucket_and_records: tuple[str, Iterable[PlanRecord | bytes]], temp_dir: str, kind: str = ""
                 ) -> SpilledBucket:
    """(bucket, rows per split, the file its records are written to): the bucket's records leave
    the job's memory between the rows summary and the pieces (`spilled_pieces` reads them back).
    The file is named by the bucket and `kind` (a bucket's records spilled in several files, as a
    bucket task's chunks and the records of other tasks, go to several): a retry writes the same one.
    The records are sorted, in blocks of SPILL_BLOCK (`iter_spilled` merges a bucket's files)."""
    bucket, records = bucket_and_records
    records = sorted(map(_record, records), key=lambda r: r.sort_key)
    path = _spill_path(temp_dir, bucket, kind)
    blocks = (pack([(r.key, r.source, r.parts) for r in records[i:i + SPILL_BLOCK]])
              for i in range(0, len(records), SPILL_BLOCK))
    write_chunks(path, itertools.chain([_COUNT_HEAD.pack(len(records))],
                                       (_BLOCK_HEAD.pack(len(block)) + block for block in blocks)))
    return bucket, bucket_rows((bucket, records))[1], (path,)


def spilled_rows(spilled: SpilledBucket) -> tuple[str, dict[str, int]]:
    """(bucket, rows per split) of a spilled bucket: its entry of the summary (`bucket_rows`)."""
    return spilled[0], spilled[1]


def _spilled_file(path: str) -> Iterator[PlanRecord]:
    """A bucket's spill file: its record count, then blocks (length, packed records)."""
    cut = ValueError(f"plan spill file {path} is cut short: the run's temp folder was changed while the job ran")
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        head = handle.read(_COUNT_HEAD.size)
        if len(head) != _COUNT_HEAD.size:
            raise cut
        (expected,) = _COUNT_HEAD.unpack(head)
        seen = 0
        while head := handle.read(_BLOCK_HEAD.size):
            (size,) = _BLOCK_HEAD.unpack(head) if len(head) == _BLOCK_HEAD.size else (-1,)
            block = handle.read(size) if size >= 0 else b""
            if size < 0 or len(block) != size:
                raise cut
            records = unpack(block)
            seen += len(records)
            for key, source, parts in records:
                yield PlanRecord(key, source, parts)
        if seen != expected:
            raise cut


def iter_spilled(paths: tuple[str, ...]) -> Iterator[PlanRecord]:
    """A spilled bucket's records in order, its files (each sorted) merged a block each at a time."""
    if len(paths) == 1:
        return _spilled_file(paths[0])
    return heapq.merge(*(_spilled_file(path) for path in paths), key=lambda r: r.sort_key)


def read_spilled(paths: tuple[str, ...]) -> list[PlanRecord]:
    return list(iter_spilled(paths))


@dataclass(frozen=True)
class PieceRef:
    """Where a bucket's piece of a shard (its part slices, one an input) lies: `length` bytes at
    `offset` of the bucket's pieces file. Only these go through the shuffle that gathers a shard."""

    path: str
    offset: int
    length: int


def spilled_pieces(spilled: SpilledBucket, summary: RowSummary, config: PreprocessConfig,
                   bytes_per_row: int) -> list[tuple[tuple[str, int], tuple[int, PieceRef]]]:
    """`bucket_pieces` of a spilled bucket, its records read back from its files (held when they
    are one file, a task's chunk; else streamed, for each split and copy), each piece's slices
    written to the bucket's pieces file as they come and referred to (`PieceRef`, read by
    `read_pieces`)."""
    bucket, rows, paths = spilled
    held = read_spilled(paths) if len(paths) == 1 else None
    records = (lambda: held) if held is not None else (lambda: iter_spilled(paths))
    out: list[tuple[tuple[str, int], tuple[int, PieceRef]]] = []
    pieces_path = paths[0] + ".pieces"

    def blobs() -> Iterator[bytes]:
        offset = 0
        for shard, (first_row, slices) in iter_bucket_pieces(bucket, rows, records, summary, config, bytes_per_row):
            blob = pack(slices)
            out.append((shard, (first_row, PieceRef(pieces_path, offset, len(blob)))))
            offset += len(blob)
            yield blob

    if any(rows.values()):
        write_chunks(pieces_path, blobs())
    return out


def read_pieces(pieces: Iterable[tuple[int, PieceRef | tuple[PartSlice, ...]]]
                ) -> list[tuple[int, tuple[PartSlice, ...]]]:
    """A shard's pieces with their slices (`shard_task`'s), read back where they are references."""
    out = []
    for first_row, piece in pieces:
        if isinstance(piece, PieceRef):
            with FileSystems.open(piece.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                handle.seek(piece.offset)
                piece = unpack(handle.read(piece.length))
        out.append((first_row, piece))
    return out


@dataclass(frozen=True)
class SpilledTask:
    """A shard's task as it goes to its writer: its slices (one an input) in a file of the temp
    folder (`spill_task`), read back by the writer (`load_task`); what spreading the shards over the
    workers needs (rows, path) on the element."""

    file: str
    split: str
    index: int
    path: str
    rows: int


def spill_task(task: ShardTask, temp_dir: str) -> SpilledTask:
    file = posixpath.join(temp_dir, f"shard-task-{task.split}-{task.index:06d}.pickle")
    write_bytes(file, pack(task))
    return SpilledTask(file, task.split, task.index, task.path, sum(piece.stop - piece.start for piece in task.slices))


def load_task(task: ShardTask | SpilledTask) -> ShardTask:
    if isinstance(task, ShardTask):
        return task
    with FileSystems.open(task.file, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return unpack(handle.read())


def shard_task(split: str, index: int, count: int, pieces: Iterable[tuple[int, tuple[PartSlice, ...]]],
               config: PreprocessConfig) -> ShardTask:
    """One shard's task from its pieces (in row order), with the plan hash `plan_shards` gives it."""
    slices = tuple(piece for _, chunk in sorted(pieces, key=lambda p: p[0]) for piece in chunk)
    path = posixpath.join(config.output, split, m.shard_name(index, count))
    plan = hashlib.sha256(json.dumps([config_key(config), split, index, count, [
        (piece.key, piece.start, piece.stop, piece.copy) for piece in slices]]).encode()).hexdigest()
    return ShardTask(split=split, index=index, count=count, path=path, slices=slices, plan=plan)


__all__ = ["BUCKET_CHARS", "SPILL_PREFIX", "PlanRecord", "RowSummary", "bucket_pieces", "bucket_rows", "plan_record",
           "read_spilled", "iter_spilled", "iter_bucket_pieces", "SpilledBucket", "SPILL_BLOCK",
           "row_summary", "shard_keys", "shard_task", "spill_bucket", "spilled_pieces", "spilled_rows",
           "PieceRef", "read_pieces", "SpilledTask", "spill_task", "load_task", "packed_plan_record"]


# What packed plan records, shard pieces and shard tasks hold (`pipeline.beam.packed`).
allow(PartSlice, ShardTask, PlanRecord)
