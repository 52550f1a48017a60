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
