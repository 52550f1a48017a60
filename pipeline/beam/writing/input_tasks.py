"""One bucket task of the end of the job (`input_spills.BucketTask`): its inputs' results from the
spill files, marked and turned into what the rest of the job needs, one task at a time.

    exact duplicates (every copy of a content is in one bucket: one task) -> near-duplicate drops
    (the few roots, a side input) -> the plan records of its buckets, spilled a bucket a file ->
    its sorted run of inputs-file lines -> its totals

Every output is small and tagged (`TAG_*`): a bucket's spill (bucket, rows per split, path), a plan
record of a bucket the task does not own (a byte range's: a file read in ranges is bucketed by the
hash of all its ranges' keys, each range's rows by its own key), the path of its run, its totals.
The same inputs give the same files and values whatever the task count: the runs merge into one
sorted file, each bucket's records are sorted, the totals are sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pipeline.beam.dedup.exact import input_key, mark_input
from pipeline.beam.dedup.near import near_dropped
from pipeline.beam.packed import pack, unpack
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.finalize import add_totals, unit_totals
from pipeline.beam.writing.input_spills import BucketTask, task_inputs, task_owns
from pipeline.beam.writing.inputs_file import sortable_line, unit_entries, write_run
from pipeline.beam.writing.shard_plan import PlanRecord, plan_record, read_spilled, spill_bucket

__all__ = ["TAG_BUCKET", "TAG_RECORD", "TAG_RUN", "TAG_TOTALS", "TASK_RUNS", "TASK_SPILLS", "mark_exact", "twins_of",
           "run_task", "merge_bucket"]

TAG_BUCKET, TAG_RECORD, TAG_RUN, TAG_TOTALS = "bucket", "record", "run", "totals"
TASK_RUNS = "task-"  # the kind of a bucket task's run of inputs-file lines (`inputs_file.write_run`)
TASK_SPILLS = "task"  # the kind of a bucket task's spill of a bucket's plan records (`shard_plan.spill_bucket`)
_NO_CONTENT = "\0"  # before an input's name: the key of an input without a content key (alone)


def _by_content(inputs: Iterable[tuple[str, list[UnitResult]]]) -> dict[str, list[tuple[str, list[UnitResult]]]]:
    """The inputs by content key (an input without one alone), each key's by path."""
    groups: dict[str, list[tuple[str, list[UnitResult]]]] = {}
    for name, parts in sorted(inputs, key=lambda named: named[0]):
        groups.setdefault(input_key(parts) or _NO_CONTENT + name, []).append((name, parts))
    return groups


def mark_exact(inputs: Iterable[tuple[str, list[UnitResult]]], drop: bool
               ) -> tuple[list[tuple[str, list[UnitResult]]], list[tuple[str, str]]]:
    """The inputs, each of a content key but the first by path marked as its duplicate (with `drop`,
    dropped: `exact.mark_input`), and (input, twin) for each of those."""
    marked, twins = [], []
    for key, members in _by_content(inputs).items():
        first = members[0][0]
        marked.append(members[0])
        for name, parts in members[1:]:
            if key.startswith(_NO_CONTENT):  # never: one input a key
                raise ValueError(f"inputs {first} and {name} under one content key")
            marked.append((name, mark_input(parts, first, drop)))
            twins.append((name, first))
    return marked, twins


def twins_of(task: BucketTask) -> list[tuple[str, str]]:
    """(input, twin) of the exact duplicates among the task's inputs."""
    return mark_exact(task_inputs(task), drop=False)[1]


def run_task(task: BucketTask, temp_dir: str, drop: bool, roots: dict[str, tuple[str, float]] | None = None,
             threshold: float | None = None) -> Iterator[tuple[str, object]]:
    """The tagged outputs of one task: exact duplicates marked (with `drop`, --dedup, dropped), the
    members of `roots` (member -> (root, similarity): --near_dedup at `threshold`) dropped, then its
    buckets' spills, the plan records of other buckets, its run of lines and its totals."""
    marked, _ = mark_exact(task_inputs(task), drop)
    results: list[UnitResult] = []
    for name, parts in marked:
        if roots:
            parts = near_dropped(parts, roots.get(name), threshold)
        results.extend(parts)
    own: dict[str, list[PlanRecord]] = {}
    for result in results:
        for bucket, record in plan_record(result):
            if task_owns(task, bucket):
                own.setdefault(bucket, []).append(record)
            else:
                yield TAG_RECORD, (bucket, pack((record.key, record.source, record.parts)))
    for bucket in sorted(own):
        yield TAG_BUCKET, spill_bucket((bucket, own[bucket]), temp_dir, TASK_SPILLS)
    lines = [sortable_line(section, entry) for result in results for section, entry in unit_entries(result)]
    yield TAG_RUN, write_run(temp_dir, task.index, lines, TASK_RUNS)
    yield TAG_TOTALS, add_totals(unit_totals(result) for result in results)


def merge_bucket(bucket_and_items: tuple[str, Iterable[tuple[str, object]]], temp_dir: str
                 ) -> tuple[str, dict[str, int], str]:
    """A bucket's spill (bucket, rows per split, path) from its task's spill and the plan records
    other tasks found for it (byte ranges'): the task's spill as it is where there are none."""
    bucket, items = bucket_and_items
    spills, records = [], []
    for tag, value in items:
        (spills if tag == TAG_BUCKET else records).append(value)
    if len(spills) == 1 and not records:
        return spills[0]
    merged = [record for _, _, path in spills for record in read_spilled(path)]
    merged.extend(PlanRecord(*unpack(blob)) for blob in records)
    return spill_bucket((bucket, merged), temp_dir)
