"""The launcher's progress: inputs done, rows and shards written, read from the run's temp folder."""

from __future__ import annotations

import json
import os

from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.run.progress import UnitProgress
from pipeline.beam.unit_results import result_path
from schemas import manifest as m


def test_progress_counts_finished_units_rows_and_shards_from_the_temp_folder(tmp_path):
    temp_dir = str(tmp_path / m.TEMP_DIR)
    units = [WorkUnit(source=str(tmp_path / f"book{i}.txt"), format="text", size=100 * (i + 1)) for i in range(3)]
    progress = UnitProgress(units, temp_dir, every=3600, terminal=False)  # no folder yet: nothing done
    assert (progress.done, progress.done_bytes) == (0, 0)
    os.makedirs(temp_dir)
    for unit, rows in zip(units[:2], (5, 7)):
        with open(result_path(temp_dir, unit.source), "w") as out:
            json.dump({"result": {"counts": {m.ROWS: rows}}}, out)
    # what is not a finished unit's record: a record being written, a part, another run's unit
    for name in ("x.json.tmp", "book2-train.arrow", "elsewhere-result.json"):
        (tmp_path / m.TEMP_DIR / name).write_text("{")
    (tmp_path / m.TEMP_DIR / m.shard_record_name("train", "shard-00000.arrow")).write_text("{}")
    progress.refresh()
    assert (progress.done, progress.done_bytes) == (2, 300)
    assert progress._extra() == "12 rows, 1 shard written"


def test_a_finished_run_closes_at_every_input_done_with_the_manifests_rows_after_its_temp_folder_is_gone(
        tmp_path, caplog):
    """A run faster than a poll (one in-process worker on a small job) deletes its temp folder before the
    thread has seen a record: the closing line comes from the manifest's figures, at 100%."""
    units = [WorkUnit(source=str(tmp_path / f"book{i}.txt"), format="text", size=100 * (i + 1)) for i in range(3)]
    progress = UnitProgress(units, str(tmp_path / m.TEMP_DIR), every=0, terminal=False)  # the folder never exists
    with caplog.at_level("INFO", logger="maskbeam.progress"):
        progress.finish(shards=2, rows=137)
    last = caplog.records[-1].getMessage()
    assert "3/3" in last and "137 rows, 2 shards written" in last, last


def test_progress_counts_the_inputs_of_group_records_once_and_an_input_when_all_its_units_are(tmp_path):
    """A group's one record file counts every member it names (rows from its header), a member named
    again by a later record (a resumed group) is not counted twice, another run's members not at all,
    and a record file still being written (no header yet) is read at a later poll."""
    from pipeline.beam.unit_groups import group_part_name
    from pipeline.beam.unit_results import UnitResult, group_record_path, save_group_results

    temp_dir = str(tmp_path / m.TEMP_DIR)
    os.makedirs(temp_dir)
    units = [WorkUnit(source=str(tmp_path / f"doc{i}.txt"), format="text", size=10 * (i + 1)) for i in range(4)]
    progress = UnitProgress(units, temp_dir, every=3600, terminal=False)

    def save(group: list[WorkUnit]) -> None:
        save_group_results(temp_dir, group_part_name(group), [
            (u, UnitResult(source=u.source, size=u.size, counts={m.ROWS: i + 2})) for i, u in enumerate(group)])

    save(units[:2])
    other = WorkUnit(source=str(tmp_path / "elsewhere.txt"), format="text", size=5)
    save([other, units[2]])  # another run's input beside one of ours
    torn = group_record_path(temp_dir, group_part_name(units[3:]))
    with open(torn, "w") as handle:
        handle.write('{"sources": ["')
    progress.refresh()
    assert (progress.done, progress.done_bytes, progress._extra()) == (3, 60, "8 rows")
    save(units[3:])  # the torn file, now whole
    save(units[1:3])  # doc1 and doc2 named again (a resumed group)
    progress.refresh()
    assert (progress.done, progress.done_bytes, progress._extra()) == (4, 100, "10 rows")


def test_a_file_read_in_byte_ranges_is_done_when_its_last_range_is(tmp_path):
    from pipeline.beam.unit_results import UnitResult, save_result

    temp_dir = str(tmp_path / m.TEMP_DIR)
    os.makedirs(temp_dir)
    book = str(tmp_path / "big.jsonl")
    ranges = [WorkUnit(source=f"{book}@{a}-{b}", format="jsonl", size=b - a, path=book, start=a, stop=b)
              for a, b in ((0, 10), (10, 30))]
    progress = UnitProgress(ranges, temp_dir, every=3600, terminal=False)
    save_result(temp_dir, ranges[1], UnitResult(source=ranges[1].source, counts={m.ROWS: 3}))
    progress.refresh()
    assert (progress.total, progress.done, progress.done_bytes) == (1, 0, 20)
    save_result(temp_dir, ranges[0], UnitResult(source=ranges[0].source, counts={m.ROWS: 1}))
    progress.refresh()
    assert (progress.done, progress.done_bytes, progress._extra()) == (1, 30, "4 rows")


def test_the_compact_index_counts_as_a_dict_of_every_unit_would(tmp_path):
    """The progress index (hashes of record names in arrays, ~21 bytes a unit) against the simple
    count it replaced: random whole files, files read in byte ranges, a dataset's row ranges and
    another run's units, finished in any order, some twice: the same inputs done, bytes and rows at
    every step. The index is made from a stream, as the launcher lists the inputs."""
    import random

    from pipeline.beam.reading.work_units import FORMAT_HF
    from pipeline.beam.run.progress import UnitIndex, input_name, record_name

    rng = random.Random(36)
    units = []
    for i in range(300):
        kind = rng.random()
        if kind < 0.1:
            book = f"/in/big{i}.jsonl"
            units += [WorkUnit(source=f"{book}@{a}", format="jsonl", size=7, path=book, start=a, stop=a + 7)
                      for a in range(0, 7 * rng.randint(1, 4), 7)]
        elif kind < 0.15:
            units += [WorkUnit(source=f"hf://d{i}?split=train&rows={r}", format=FORMAT_HF, size=3, hf_name=f"d{i}",
                               hf_split="train") for r in range(rng.randint(1, 3))]
        else:
            units.append(WorkUnit(source=f"/in/doc {i}\n\udc80.txt", format="text", size=rng.randint(0, 999)))
    index = UnitIndex(iter(units))  # the launcher builds it from a stream of units
    parts = {}
    for u in units:
        parts.setdefault(input_name(u), []).append(u)
    assert (index.units, index.inputs, index.bytes) == (len(units), len(parts), sum(u.size for u in units))
    progress = UnitProgress(index, str(tmp_path / m.TEMP_DIR), every=3600, terminal=False)
    finished: set[str] = set()
    order = units + rng.sample(units, 40) + [WorkUnit(source="/elsewhere.txt", format="text", size=5)]
    rng.shuffle(order)
    for step, unit in enumerate(order):
        progress._mark(index.find(record_name(unit.source)), 2)
        if unit in units:
            finished.add(unit.source)
        if step % 37 == 0 or step == len(order) - 1:
            done = sum(all(p.source in finished for p in members) for members in parts.values())
            assert progress.done == done
            assert progress.done_bytes == sum(u.size for u in units if u.source in finished)
            assert progress._rows_made == 2 * len(finished)
    assert progress.done == progress.total == len(parts)
