"""The end of the job's per-input work through spill files (issue 36 item 1): the workers' spill
files read back in bucket tasks give every input exactly once, to the task of its content key's
bucket, and the tasks' outputs (exact duplicates marked or dropped, near duplicates dropped, the
plan's bucket spills, the inputs-file lines, the totals) are those of the simple all-in-memory
functions (`exact.mark_duplicates`, `near_dropped`, `plan_record`, `unit_entries`, `unit_totals`),
for any task count."""

from __future__ import annotations

import random
import string
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.beam.dedup.exact import by_input, input_key, mark_duplicates
from pipeline.beam.dedup.near import near_dropped
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.finalize import add_totals, unit_totals
from pipeline.beam.writing.input_spills import (
    BUCKETS,
    input_bucket_of,
    plan_tasks,
    read_range,
    spill_paths,
    task_inputs,
    write_spill,
)
from pipeline.beam.writing.input_tasks import (
    TAG_BUCKET,
    TAG_RECORD,
    TAG_RUN,
    TAG_TOTALS,
    TASK_CHUNK,
    merge_bucket,
    run_task,
    twins_of,
)
from pipeline.beam.writing.inputs_file import merge_runs, sortable_line, unit_entries
from pipeline.beam.writing.shard_plan import plan_record, read_spilled
from schemas import manifest as m

HEX = "0123456789abcdef"


def _key(rng: random.Random, pool: list[str]) -> str:
    if pool and rng.random() < 0.2:
        return rng.choice(pool)  # an exact duplicate's content
    key = "".join(rng.choice(HEX) for _ in range(64))
    pool.append(key)
    return key


def _name(rng: random.Random, i: int) -> str:
    odd = rng.choice(["", "\n", "\"", " ", "\udc80", "é"])
    return f"/in/{rng.choice(string.ascii_lowercase)}{odd}{i:05d}.txt"


def _result(rng: random.Random, source: str, key: str, file: str = "") -> UnitResult:
    skipped = rng.random() < 0.1
    part = rng.randrange(10**9)
    parts = {} if skipped else {m.TRAIN: (f"/tmp/parts/{part}-train.arrow", rng.randint(1, 9))}
    if not skipped and rng.random() < 0.3:
        parts[m.VALIDATION] = (f"/tmp/parts/{part}-validation.arrow", rng.randint(1, 3))
    counts = dict.fromkeys(m.INPUT_COUNT_NAMES, 0)
    counts[m.FILES_READ] = 0 if file else 1
    counts[m.ROWS] = sum(rows for _, rows in parts.values())
    counts[m.FILES_SKIPPED] = int(skipped)
    return UnitResult(source=source, size=rng.randint(1, 5000), key="" if skipped else key, parts=parts,
                      part_starts={m.TRAIN: rng.randint(0, 50)} if parts else {}, counts=counts,
                      skip_reason="empty" if skipped else None, file=file)


def _inputs(seed: int, n: int) -> list[tuple[str, list[UnitResult]]]:
    """n inputs: whole files (a fifth of them copies of another's content, some skipped, a few with
    a content key that is not hex) and a few files read in byte ranges (each range its own key and
    plan bucket; some copies of another such file), names with newlines, quotes and lone surrogates."""
    rng = random.Random(seed)
    pool: list[str] = []
    ranged: list[list[str]] = []
    out = []
    for i in range(n):
        name = _name(rng, i)
        if rng.random() < 0.08:
            if ranged and rng.random() < 0.3:
                keys = rng.choice(ranged)  # an exact copy of an earlier file read in ranges
            else:
                keys = [_key(rng, []) for _ in range(rng.randint(2, 4))]
                ranged.append(keys)
            ranges = [_result(rng, f"{name}@{r}", key, file=name) for r, key in enumerate(keys)]
            ranges[0].counts[m.FILES_READ] = 1
            out.append((name, ranges))
        elif rng.random() < 0.03:
            out.append((name, [_result(rng, name, rng.choice(["not hex", "NOT HEX", "zz"]))]))
        else:
            out.append((name, [_result(rng, name, _key(rng, pool))]))
    return out


def _spilled(tmp_path: Path, inputs: list, files: int, seed: int) -> list:
    """The inputs written as the workers would: in `files` spill files, in any grouping."""
    rng = random.Random(seed)
    groups: list[list] = [[] for _ in range(files)]
    for item in inputs:
        rng.choice(groups).append(item)
    return [write_spill(str(tmp_path), [f"group {i}"], group) for i, group in enumerate(groups)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 120), files=st.integers(1, 6),
       per_task=st.integers(1, 200))
def test_every_input_reaches_exactly_the_task_of_its_bucket(tmp_path_factory, seed, n, files, per_task):
    tmp_path = tmp_path_factory.mktemp("spills")
    inputs = _inputs(seed, n)
    tasks = plan_tasks(_spilled(tmp_path, inputs, files, seed), str(tmp_path), per_task)
    assert len(tasks) == max(1, min(BUCKETS, -(-n // per_task)))
    assert tasks[0].lo == 0 and tasks[-1].hi == BUCKETS
    assert all(a.hi == b.lo for a, b in zip(tasks, tasks[1:]))
    refs = {ref.path: ref for ref in _spilled(tmp_path, inputs, files, seed) if ref is not None}
    listed = [path for task in tasks for path in spill_paths(task)]
    assert set(listed) == set(refs)
    for task in tasks:  # a task reads only the files holding some of its buckets
        assert all(refs[path].lo < task.hi and refs[path].hi > task.lo for path in spill_paths(task))
    seen = []
    for task in tasks:
        for name, parts in task_inputs(task):
            assert task.lo <= input_bucket_of(name, parts) < task.hi
            seen.append((name, parts))
    key = lambda item: (item[0], [p.source for p in item[1]])  # noqa: E731
    assert sorted(seen, key=key) == sorted(inputs, key=key)


def _run_all(tmp_path: Path, inputs: list, per_task: int, drop: bool, roots: dict | None, threshold: float | None,
             chunk: int = TASK_CHUNK):
    """Every task run, the buckets merged, the runs merged: (plan records by bucket, lines, totals, twins)."""
    tasks = plan_tasks(_spilled(tmp_path, inputs, 4, per_task), str(tmp_path), per_task)
    by_bucket: dict[str, list] = {}
    runs, totals, twins = [], [], []
    for task in tasks:
        twins.extend(twins_of(task, chunk))
        for tag, value in run_task(task, str(tmp_path), drop, roots, threshold, chunk):
            if tag == TAG_BUCKET:
                by_bucket.setdefault(value[0], []).append((tag, value))
            elif tag == TAG_RECORD:
                by_bucket.setdefault(value[0], []).append((tag, value[1]))
            elif tag == TAG_RUN:
                runs.append(value)
            else:
                assert tag == TAG_TOTALS
                totals.append(value)
    plan = {}
    for bucket, items in by_bucket.items():
        name, _, path = merge_bucket((bucket, items), str(tmp_path))
        assert name == bucket
        plan[bucket] = read_spilled(path)
    record = merge_runs(runs, str(tmp_path / "inputs.jsonl"))
    return plan, (tmp_path / "inputs.jsonl").read_bytes(), record, add_totals(totals), sorted(twins)


def _oracle(inputs: list, drop: bool, roots: dict | None, threshold: float | None, tmp_path: Path):
    """The same from every result in one list, by the simple functions."""
    results = mark_duplicates([part for _, parts in inputs for part in parts], drop)
    if roots:
        results = [r for name, parts in by_input(results).items()
                   for r in near_dropped(parts, roots.get(name), threshold)]
    plan: dict[str, list] = {}
    for result in results:
        for bucket, record in plan_record(result):
            plan.setdefault(bucket, []).append(record)
    plan = {bucket: sorted(records, key=lambda r: r.sort_key) for bucket, records in plan.items()}
    lines = sorted(sortable_line(s, e) for r in results for s, e in unit_entries(r))
    (tmp_path / "oracle").mkdir()
    run = tmp_path / "oracle" / "run.jsonl"
    run.write_text("".join(line for _, line in lines), encoding="ascii")
    record = merge_runs([str(run)], str(tmp_path / "oracle" / "inputs.jsonl"))
    first: dict[str, str] = {}
    twins = []
    for name, parts in sorted(inputs, key=lambda item: item[0]):
        key = input_key(parts)
        if key and key in first:
            twins.append((name, first[key]))
        first.setdefault(key, name)
    totals = add_totals(unit_totals(r) for r in results)
    return plan, (tmp_path / "oracle" / "inputs.jsonl").read_bytes(), record, totals, sorted(twins)


def _copies(inputs: list, seed: int) -> list[tuple[str, list[UnitResult]]]:
    """The inputs with most whole files' content one content's (the hostile case: one bucket, one
    task), its copies skipped and not."""
    rng = random.Random(seed)
    key = "".join(rng.choice(HEX) for _ in range(64))
    return [(name, [replace(parts[0], key=key)]) if len(parts) == 1 and parts[0].key and rng.random() < 0.7
            else (name, parts) for name, parts in inputs]


@pytest.mark.parametrize("seed, n, per_task, drop, near, chunk, copies", [
    (1, 0, 5, False, False, TASK_CHUNK, False), (2, 1, 1, True, False, TASK_CHUNK, False),
    (3, 300, 7, True, True, TASK_CHUNK, False), (4, 300, 10_000, False, True, TASK_CHUNK, False),
    (5, 500, 1, True, True, TASK_CHUNK, False), (6, 80, 3, False, False, TASK_CHUNK, False),
    # a task holding more than `chunk` (copies of one content): read twice, spilled and run in chunks
    (7, 400, 10_000, False, True, 7, True), (8, 400, 50, True, True, 1, True), (9, 300, 10_000, True, False, 64, False),
    (10, 250, 40, False, False, 2, True)])
def test_bucket_tasks_give_what_the_all_in_memory_functions_give(tmp_path, seed, n, per_task, drop, near, chunk,
                                                                 copies):
    inputs = _inputs(seed, n)
    if copies:
        inputs = _copies(inputs, seed)
    rng = random.Random(seed)
    names = sorted(name for name, _ in inputs)
    roots = None
    if near and len(names) > 2:  # a tenth of the inputs near duplicates of an earlier one
        roots = {b: (a, round(rng.uniform(0.8, 1.0), 4)) for a, b in
                 (sorted(rng.sample(names, 2)) for _ in range(len(names) // 10))}
    got = _run_all(tmp_path / "job", inputs, per_task, drop, roots, 0.8, chunk)
    expected = _oracle(inputs, drop, roots, 0.8, tmp_path)
    assert got[0] == expected[0]  # the plan's buckets, record by record
    assert got[1] == expected[1]  # the inputs file, byte by byte
    assert got[2] == expected[2]
    assert got[3] == expected[3]  # the totals
    assert got[4] == expected[4]  # the exact duplicates the near-duplicate pairs are checked against
    if n:
        assert got[3][m.KEY_COUNTS][m.FILES_READ] == sum(1 for _, parts in inputs
                                                        if parts[0].counts[m.FILES_READ])


def test_a_large_inputs_spill_file_is_read_by_the_one_task_of_its_bucket(tmp_path):
    """Every file read in byte ranges, every input over 1 MB and, with --group_inputs 1, every input
    has a spill file of its own: read by every task, a million of them made 50 million opens."""
    inputs = _inputs(11, 400)
    refs = [write_spill(str(tmp_path), [name], [(name, parts)]) for name, parts in inputs]
    tasks = plan_tasks(refs, str(tmp_path), 40)
    assert len(tasks) == 10
    assert sum(len(spill_paths(task)) for task in tasks) == 400
    assert sum(len(task_inputs(task)) for task in tasks) == 400


def test_a_spill_file_cut_short_is_named(tmp_path):
    inputs = _inputs(9, 40)
    ref = write_spill(str(tmp_path), ["g"], inputs)
    assert ref.inputs == 40
    data = Path(ref.path).read_bytes()
    Path(ref.path).write_bytes(data[:-10])
    with pytest.raises(ValueError, match="cut short") as error:
        list(read_range(ref.path, 0, BUCKETS))
    assert ref.path in str(error.value)
    assert write_spill(str(tmp_path), ["none"], []) is None


def test_a_planted_spill_file_runs_no_code(tmp_path):
    """Spill files lie in the output's temp folder: one naming any callable is refused."""
    import pickle
    import struct

    from pipeline.beam.packed import PackedValueRefused

    for body in (pickle.dumps(print), pickle.dumps([("/in/a.txt", [__import__("os").system])])):
        head = pickle.dumps([(0, 0, len(body))])
        path = tmp_path / "planted.spill"
        path.write_bytes(struct.pack("<Q", len(head)) + head + body)
        with pytest.raises(PackedValueRefused):
            list(read_range(str(path), 0, BUCKETS))


def test_the_twins_table_is_every_tasks_twins(tmp_path):
    """--dedup's twins go to files (`twin_table.spill_twins`, sorted in files of at most 5 here) and
    one table the scoring maps (`write_twin_table`), not one element a twin: the table answers as the
    tasks' `twins_of` (the oracle), every input of several copies once, a task run again too."""
    from pipeline.beam.dedup.root_table import read_roots
    from pipeline.beam.dedup.twin_table import spill_twins, write_twin_table

    inputs = _copies(_inputs(12, 300), 12)
    tasks = plan_tasks(_spilled(tmp_path, inputs, 4, 12), str(tmp_path), 40)
    every = dict(twin for task in tasks for twin in twins_of(task, 7))
    assert len(every) > 100
    pieces = [piece for task in tasks for piece in spill_twins(task, str(tmp_path), 7, spill=5)]
    assert len(pieces) > len(tasks) > 1
    again = list(spill_twins(tasks[0], str(tmp_path), 7, spill=5))  # a task run again
    table = read_roots(write_twin_table((None, pieces + again), str(tmp_path)))
    assert list(spill_twins(tasks[0], str(tmp_path), 7, paired=[])) == []  # no candidate pair: no file
    assert dict(table) == {name: (twin, 0.0) for name, twin in every.items()}
    assert all(name not in table for name, _ in inputs if name not in every)

