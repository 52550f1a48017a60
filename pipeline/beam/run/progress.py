"""Progress of a running preprocess job, watched from the launcher: every finished unit leaves its
result record in the temp folder (that is what --resume reuses; a group of small inputs one record
file for all, whose header line names them and their rows), and every finished shard its shard
record, so a thread listing that folder knows how far the workers are on any runner, without a
metrics service. Each record file is read once; a listing holds a name a group, not an input."""

from __future__ import annotations

import fnmatch
import json
import logging
import posixpath
import threading
from collections import Counter

from pipeline.beam.reading.work_units import FORMAT_HF, WorkUnit
from pipeline.beam.unit_results import GROUP_RECORD_SUFFIX, list_names, read_group_header, result_path
from pipeline.beam.writing.arrow_io import read_text
from pipeline.console import ProgressReporter
from pipeline.console.formatting import plural
from schemas import manifest as m

_log = logging.getLogger("maskbeam.progress")


def temp_names(folder: str) -> list[str]:
    """The names of the files in `folder` ([] while it does not exist). A local folder is listed
    without Beam, whose match stats every file: polling a temp folder of thousands of parts twice a
    second that way took a core's tenth from the workers."""
    return list_names(folder)


def input_name(unit: WorkUnit) -> str:
    """The input a unit of work belongs to: its file (a byte range's too), or its --hf_dataset."""
    if unit.format == FORMAT_HF:
        return f"hf://{unit.hf_name}?split={unit.hf_split}"
    return unit.path or unit.source


class UnitProgress:
    """Polls the temp folder every `poll_seconds` on a daemon thread and feeds a ProgressReporter:
    inputs done of total, bytes read, rows written so far, shards written."""

    def __init__(self, units: list[WorkUnit], temp_dir: str, *, every: float, poll_seconds: float = 0.5,
                 terminal: bool | None = None) -> None:
        self._temp_dir = temp_dir
        self._units = {self._record_name(u.source): u for u in units}  # by the name of its own record
        self._seen: set[str] = set()  # group record files read
        # Progress counts inputs as the summary does: a file split in byte ranges is one input, and so is
        # a --hf_dataset (of many row ranges); an input is done when all its parts are.
        self._parts = Counter(input_name(u) for u in self._units.values())
        self.total = len(self._parts)
        self._rows: dict[str, int] = {}  # a done unit's record name -> its rows
        self._finished: Counter = Counter()  # an input of many units -> those done (no pass over all a tick)
        self._done = self._done_bytes = self._rows_made = 0
        self._shards = 0
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self.reporter = ProgressReporter(self.total, sum(u.size for u in units), desc="preprocess", every=every,
                                         logger=_log, terminal=terminal)
        self._poll()
        self.reporter.start_from(self.done, self.done_bytes)
        self._thread = threading.Thread(target=self._loop, name="maskbeam-progress", daemon=True)

    @property
    def done(self) -> int:
        return self._done

    @property
    def done_bytes(self) -> int:
        return self._done_bytes

    def _record_name(self, source: str) -> str:
        return posixpath.basename(result_path(self._temp_dir, source))

    def _mark(self, name: str, rows: int) -> None:
        """The unit of record name `name` is done with `rows` rows (once: a later record of it changes
        nothing)."""
        if name in self._rows:
            return
        self._rows[name] = rows
        self._rows_made += rows
        unit = self._units[name]
        self._done_bytes += unit.size
        whole = input_name(unit)
        if self._parts[whole] == 1:
            self._done += 1
            return
        self._finished[whole] += 1
        if self._finished[whole] == self._parts[whole]:
            self._done += 1

    def refresh(self) -> None:
        """Look at the temp folder now (the thread looks every `poll_seconds`)."""
        self._poll()

    def _poll(self) -> None:
        names = temp_names(self._temp_dir)
        for name in names:
            if name in self._units and name not in self._rows:
                try:
                    record = json.loads(read_text(posixpath.join(self._temp_dir, name)))
                    self._mark(name, int(record["result"]["counts"].get(m.ROWS, 0)))
                except (ValueError, KeyError, OSError):
                    continue  # being written: counted at the next poll
            elif name.endswith(GROUP_RECORD_SUFFIX) and name not in self._seen:
                header = read_group_header(posixpath.join(self._temp_dir, name))
                if header is None:
                    continue  # being written (an object store's upload), or not one
                self._seen.add(name)
                for source, rows in zip(header["sources"], header.get("rows", ())):
                    member = self._record_name(source)
                    if member in self._units:  # another run's are not counted
                        self._mark(member, int(rows))
        # The temp folder is deleted when the run finishes: never count down.
        self._shards = max(self._shards, len(fnmatch.filter(names, m.shard_record_name("*", "*"))))

    def _extra(self, rows_made: int | None = None) -> str:
        rows = plural(self._rows_made if rows_made is None else rows_made, "row")
        return f"{rows}, {plural(self._shards, 'shard')} written" if self._shards else rows

    def _loop(self) -> None:
        announced = self.done == self.total
        while not self._stop.wait(self._poll_seconds):
            self._poll()
            self.reporter.update(self.done, self.done_bytes, self._extra())
            if not announced and self.done == self.total:
                announced = True
                _log.info("stage 1 of 2 done (read, clean, tokenize, chunk: %s); stage 2: mask and write "
                          "shards", plural(self.done, "input"))

    def __enter__(self) -> UnitProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop(final=False)  # the closing line comes from finish(), with the manifest's shard count

    def stop(self, final: bool = True) -> None:
        """Stop polling; with `final`, one last poll and the closing line."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if final:
            self.finish()

    def finish(self, shards: int | None = None, rows: int | None = None) -> None:
        """The closing line, once. After a finished run, the manifest's `shards` and `rows` (the
        finished run deletes the temp folder, so a run faster than a poll leaves no record to count):
        every input is then done, processed or skipped with its reason."""
        self._poll()
        if shards is not None:
            self._shards = shards
        if rows is None:
            self.reporter.update(self.done, self.done_bytes, self._extra())
        else:
            self.reporter.update(self.total, sum(u.size for u in self._units.values()), self._extra(rows))
        self.reporter.close()
