"""Every input's results on their way from the workers to the end of the job, in files of the temp
folder instead of Beam's shuffles.

Beam's local runner holds every element of a shuffle in memory until the shuffle's consumer runs.
The end of the job needs every input's results four ways (by content key for exact duplicates, by
input for the near-duplicate drops, by bucket for the shard plan, by line for the inputs file), and
those shuffles were all of the growth of a run's memory with its number of inputs: 6.7 KB an
input, 6.7 GB for a million files. Now a worker writes the results of one work unit (a group of
small inputs, or a large input) to one spill file (`write_spill`), sorted by the input's bucket of
content keys (the plan's buckets, `shard_plan.BUCKET_CHARS`), and only a reference (`SpillRef`,
its path, input count and bucket range) goes on. Once every unit is done, `plan_tasks` cuts the
buckets into ranges of about INPUTS_PER_TASK inputs (`BucketTask`), and a task reads its range
from every spill file holding any of its buckets (`read_range`: one header and one read a file):
exact duplicates meet in it (equal content, equal bucket), and it writes its buckets' plan records
and its sorted run of inputs-file lines itself (`input_tasks`). Memory is one task's inputs on each
worker and, in the runner, a reference a work unit; the bytes on disk are ~400 an input.

A spill file: an 8-byte little-endian header length, the header (the packed list of (bucket,
offset, length) of its sections, by bucket), then one packed section a bucket: the list of (input,
its results). An input without a content key (skipped, or it read nothing) goes to the bucket of a
hash of its name: it is alone whatever the bucket. Every file is written whole under a temporary
name, then renamed (`arrow_io.write_bytes`): a step a runner reruns never cuts a file another reads.
"""

from __future__ import annotations

import bisect
import hashlib
import posixpath
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.dedup.exact import input_key
from pipeline.beam.packed import allow, pack, unpack
from pipeline.beam.unit_results import UnitResult, _unpickled_result, unit_file_stem
from pipeline.beam.writing.arrow_io import write_bytes
from pipeline.beam.writing.shard_plan import BUCKET_CHARS
from schemas.options import DEFAULT_TASK_INPUTS

__all__ = ["BUCKETS", "INPUTS_PER_TASK", "SPILL_SUFFIX", "SpillRef", "BucketTask", "input_bucket_of", "write_spill",
           "read_range", "plan_tasks", "bucket_name", "task_owns", "spill_paths", "task_inputs",
           "iter_task_inputs"]

BUCKETS = 16 ** BUCKET_CHARS  # 4,096: the shard plan's buckets (hex content keys' first characters)
INPUTS_PER_TASK = DEFAULT_TASK_INPUTS  # --task_inputs: a task holds about this many inputs' results, ~40 MB
SPILL_SUFFIX = "-inputs.spill"
INDEX_SUFFIX = "-spills.index"
_HEAD = struct.Struct("<Q")
_NUL = "\0"  # never in a path: a name made of several inputs' is apart from any one input's


@dataclass(frozen=True)
class SpillRef:
    """A spill file (`write_spill`), how many inputs it holds and the range of its buckets [lo, hi):
    all that goes through the runner. Only the tasks whose buckets meet that range read the file
    (a large input's file is read by one task, a group's by most)."""

    path: str
    inputs: int
    lo: int = 0
    hi: int = BUCKETS


@dataclass(frozen=True)
class BucketTask:
    """Buckets [lo, hi) of the spill files listed in `spills` (`plan_tasks`: those holding any of
    them); task `index` of `count`."""

    index: int
    count: int
    lo: int
    hi: int
    spills: str


def _hex_bucket(key: str) -> int | None:
    head = key[:BUCKET_CHARS]
    if len(head) != BUCKET_CHARS or any(c not in "0123456789abcdef" for c in head):
        return None
    return int(head, 16)


def bucket_name(bucket: int) -> str:
    """A bucket's number as the plan names it (`shard_plan.plan_record`: the key's first characters)."""
    return f"{bucket:0{BUCKET_CHARS}x}"


def task_owns(task: BucketTask, plan_bucket: str) -> bool:
    """Whether the plan bucket `plan_bucket` (a key's first characters) is one of `task`'s."""
    number = _hex_bucket(plan_bucket)
    return number is not None and task.lo <= number < task.hi


def input_bucket_of(name: str, parts: list[UnitResult]) -> int:
    """The bucket of an input: its content key's (`exact.input_key`: equal for exact duplicates, and
    a whole input's plan bucket; a hash of the key where it is not hex), or a hash of its name's
    when it has none (it is then alone whatever the bucket)."""
    key = input_key(parts)
    number = _hex_bucket(key)
    if number is not None:
        return number
    text = key or "\0" + name
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:4], "big") % BUCKETS


def write_spill(temp_dir: str, sources: Iterable[str], inputs: Iterable[tuple[str, list[UnitResult]]]
                ) -> SpillRef | None:
    """Write `inputs` (input, its results) to a spill file named by `sources` (the work unit's: a
    retry writes the same file); None when there are none."""
    by_bucket: dict[int, list[tuple[str, list[UnitResult]]]] = {}
    count = 0
    for name, parts in inputs:
        by_bucket.setdefault(input_bucket_of(name, parts), []).append((name, parts))
        count += 1
    if not count:
        return None
    sections, header, offset = [], [], 0
    for bucket in sorted(by_bucket):
        blob = pack(by_bucket[bucket])
        header.append((bucket, offset, len(blob)))
        sections.append(blob)
        offset += len(blob)
    head = pack(header)
    path = unit_file_stem(temp_dir, _NUL.join(["spill", *sources])) + SPILL_SUFFIX
    write_bytes(path, _HEAD.pack(len(head)) + head + b"".join(sections))
    return SpillRef(path, count, header[0][0], header[-1][0] + 1)


def read_range(path: str, lo: int, hi: int) -> Iterator[tuple[str, list[UnitResult]]]:
    """The (input, its results) of buckets [lo, hi) of one spill file, bucket by bucket."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        (size,) = _HEAD.unpack(_read_exactly(handle, _HEAD.size, path))
        header = unpack(_read_exactly(handle, size, path))
        mine = [(bucket, offset, length) for bucket, offset, length in header if lo <= bucket < hi]
        if not mine:
            return
        start = mine[0][1]
        handle.seek(_HEAD.size + size + start)
        body = _read_exactly(handle, mine[-1][1] + mine[-1][2] - start, path)
    for _, offset, length in mine:
        yield from unpack(body[offset - start:offset - start + length])


def _read_exactly(handle, size: int, path: str) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise ValueError(f"spill file {path} is cut short ({len(data)} of {size} bytes read): the run's temp "
                         f"folder was changed while the job ran")
    return data


def plan_tasks(refs: Iterable[SpillRef | None], temp_dir: str, inputs_per_task: int = INPUTS_PER_TASK
               ) -> list[BucketTask]:
    """The bucket tasks of a run from its spill files' references (any order; None ignored): the
    buckets cut into equal ranges, one a task of about `inputs_per_task` inputs (content keys are
    hashes: the inputs spread evenly over the buckets, but for the copies of one content, which
    share one), each task's spill files (those whose buckets meet its range) listed in an index
    file of `temp_dir`. At least one task: with no input, one of no file, for the totals and the
    inputs file."""
    if inputs_per_task < 1:
        raise ValueError(f"inputs_per_task must be >= 1, got {inputs_per_task}")
    refs = sorted((ref for ref in refs if ref is not None), key=lambda ref: ref.path)
    inputs = sum(ref.inputs for ref in refs)
    count = max(1, min(BUCKETS, -(-inputs // inputs_per_task)))
    digest = hashlib.sha256("\n".join(ref.path for ref in refs).encode("utf-8", "surrogatepass")).hexdigest()[:24]
    lows = [i * BUCKETS // count for i in range(count)]
    files: list[list[str]] = [[] for _ in range(count)]
    for ref in refs:  # by path: each task's list in path order
        for i in range(bisect.bisect_right(lows, ref.lo) - 1, bisect.bisect_left(lows, ref.hi)):
            files[i].append(ref.path)
    tasks = []
    for i in range(count):
        index = posixpath.join(temp_dir, f"{digest}-{i:05d}-of-{count:05d}{INDEX_SUFFIX}")
        write_bytes(index, pack(files[i]))
        tasks.append(BucketTask(i, count, lows[i], lows[i + 1] if i + 1 < count else BUCKETS, index))
    return tasks


def spill_paths(task: BucketTask) -> list[str]:
    with FileSystems.open(task.spills, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return unpack(handle.read())


def iter_task_inputs(task: BucketTask) -> Iterator[tuple[str, list[UnitResult]]]:
    """Every (input, its results) of the task's buckets, from every spill file of the run, one
    file's range at a time."""
    for path in spill_paths(task):
        yield from read_range(path, task.lo, task.hi)


def task_inputs(task: BucketTask) -> list[tuple[str, list[UnitResult]]]:
    return list(iter_task_inputs(task))


# What spill files hold (`pipeline.beam.packed`): results, as their own reduce builds them.
allow(_unpickled_result)
