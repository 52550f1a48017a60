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
