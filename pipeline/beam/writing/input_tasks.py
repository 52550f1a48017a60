"""One bucket task of the end of the job (`input_spills.BucketTask`): its inputs' results from the
spill files, marked and turned into what the rest of the job needs, one task at a time.

    exact duplicates (every copy of a content is in one bucket: one task; the first by path of
    each content found by a first read) -> near-duplicate drops (the roots' table, `root_table`) ->
    the plan records of its buckets, spilled a bucket a file -> its sorted run of inputs-file
    lines -> its totals

A task holds about TASK_CHUNK inputs at most, whatever the copies of one content: past that many it
reads its spill files again instead of holding them, and spills records and writes runs in chunks.

Every output is small and tagged (`TAG_*`): a bucket's spill (bucket, rows per split, files), a plan
record of a bucket the task does not own (a byte range's: a file read in ranges is bucketed by the
hash of all its ranges' keys, each range's rows by its own key), the path of its run, its totals.
The same inputs give the same files and values whatever the task count: the runs merge into one
sorted file, each bucket's records are sorted, the totals are sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from pipeline.beam.dedup.exact import input_key, mark_input
from pipeline.beam.dedup.near import near_dropped
from pipeline.beam.packed import pack, unpack
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.finalize import add_totals, unit_totals
from pipeline.beam.writing.input_spills import INPUTS_PER_TASK, BucketTask, iter_task_inputs, task_owns
from pipeline.beam.writing.inputs_file import sortable_line, unit_entries, write_run
from pipeline.beam.writing.shard_plan import PlanRecord, SpilledBucket, plan_record, spill_bucket

__all__ = ["TAG_BUCKET", "TAG_RECORD", "TAG_RUN", "TAG_TOTALS", "TASK_RUNS", "TASK_SPILLS", "TASK_CHUNK",
           "twins_of", "run_task", "merge_bucket"]

TAG_BUCKET, TAG_RECORD, TAG_RUN, TAG_TOTALS = "bucket", "record", "run", "totals"
TASK_RUNS = "task-"  # the kind of a bucket task's run of inputs-file lines (`inputs_file.write_run`)
TASK_SPILLS = "task"  # the kind of a bucket task's spill of a bucket's plan records (`shard_plan.spill_bucket`)
TASK_CHUNK = INPUTS_PER_TASK  # inputs a task holds at once; past it (the copies of one content, one bucket)
# it reads its spill files twice and writes its plan records and lines in chunks of this many

Named = tuple[str, list[UnitResult]]


def _task_reads(task: BucketTask, chunk: int) -> tuple[dict[str, str], Callable[[], Iterable[Named]]]:
    """The task's first input of each content key, and its inputs again: those of the first read
    where they are at most `chunk`, else a second read of its spill files (one file's range held)."""
    first: dict[str, str] = {}
    kept: list[Named] | None = []
    for item in iter_task_inputs(task):
        name, parts = item
        key = input_key(parts)
        if key and (key not in first or name < first[key]):
            first[key] = name
        if kept is not None:
            kept.append(item)
            if len(kept) > chunk:
                kept = None
    return first, (lambda: kept) if kept is not None else (lambda: iter_task_inputs(task))


def _twin(name: str, parts: list[UnitResult], first: dict[str, str]) -> str | None:
    """The first input by path of this input's content when it is not this one, else None."""
    key = input_key(parts)
    twin = first.get(key) if key else None
    return twin if twin != name else None


def twins_of(task: BucketTask, chunk: int = TASK_CHUNK) -> Iterator[tuple[str, str]]:
    """(input, twin) of the exact duplicates among the task's inputs."""
    first, inputs = _task_reads(task, chunk)
    for name, parts in inputs():
        twin = _twin(name, parts, first)
        if twin is not None:
            yield name, twin


def run_task(task: BucketTask, temp_dir: str, drop: bool, roots: Mapping[str, tuple[str, float]] | None = None,
             threshold: float | None = None, chunk: int = TASK_CHUNK) -> Iterator[tuple[str, object]]:
    """The tagged outputs of one task: exact duplicates marked (with `drop`, --dedup, dropped), the
    members of `roots` (member -> (root, similarity), as `root_table.RootTable` maps them:
    --near_dedup at `threshold`) dropped, then its buckets' spills, the plan records of other
    buckets, its runs of lines and its totals.

    A task holds at most about `chunk` inputs' results, records and lines: past that many (a content
    of many copies fills one bucket) it spills its buckets' records (a bucket then has several
    sorted files, merged as they are read: `shard_plan.iter_spilled`) and writes a run of lines
    every `chunk` of each; the same inputs give the same plan and inputs file either way."""
    first, inputs = _task_reads(task, chunk)
    own: dict[str, list[PlanRecord]] = {}
    lines: list[tuple[tuple, str]] = []
    totals: list[dict] = []
    held = spills = runs = 0
    for name, parts in inputs():
        parts = mark_input(parts, _twin(name, parts, first), drop)
        if roots:
            parts = near_dropped(parts, roots.get(name), threshold)
        for result in parts:
            for bucket, record in plan_record(result):
                if task_owns(task, bucket):
                    own.setdefault(bucket, []).append(record)
                    held += 1
                else:
                    yield TAG_RECORD, (bucket, pack((record.key, record.source, record.parts)))
            lines.extend(sortable_line(section, entry) for section, entry in unit_entries(result))
            totals.append(unit_totals(result))
        if held >= chunk:
            yield from _spilled(own, temp_dir, spills)
            own, held, spills = {}, 0, spills + 1
        if len(lines) >= chunk:
            yield TAG_RUN, write_run(temp_dir, task.index, lines, f"{TASK_RUNS}{runs}-" if runs else TASK_RUNS)
            lines, runs = [], runs + 1
            totals = [add_totals(totals)]
    yield from _spilled(own, temp_dir, spills)
    if lines or not runs:
        yield TAG_RUN, write_run(temp_dir, task.index, lines, f"{TASK_RUNS}{runs}-" if runs else TASK_RUNS)
    yield TAG_TOTALS, add_totals(totals)


def _spilled(own: dict[str, list[PlanRecord]], temp_dir: str, chunk: int) -> Iterator[tuple[str, object]]:
    kind = f"{TASK_SPILLS}{chunk}" if chunk else TASK_SPILLS
    for bucket in sorted(own):
        yield TAG_BUCKET, spill_bucket((bucket, own[bucket]), temp_dir, kind)


def merge_bucket(bucket_and_items: tuple[str, Iterable[tuple[str, object]]], temp_dir: str) -> SpilledBucket:
    """A bucket's spill (bucket, rows per split, its sorted files) from its task's spills (one a
    chunk) and the plan records other tasks found for it (byte ranges': few, spilled to one more
    file); read by `shard_plan.spilled_pieces` as one sorted stream. No record is read here."""
    bucket, items = bucket_and_items
    spills, records = [], []
    for tag, value in items:
        (spills if tag == TAG_BUCKET else records).append(value)
    if records:
        spills.append(spill_bucket((bucket, [PlanRecord(*unpack(blob)) for blob in records]), temp_dir))
    if len(spills) == 1:
        return spills[0]
    rows: dict[str, int] = {}
    for _, spill_rows, _ in spills:
        for split, n in spill_rows.items():
            rows[split] = rows.get(split, 0) + n
    return bucket, rows, tuple(sorted(path for _, _, paths in spills for path in paths))
