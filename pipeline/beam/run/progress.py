"""Progress of a running preprocess job, watched from the launcher: every finished unit leaves its
result record in the temp folder (that is what --resume reuses; a group of small inputs one record
file for all, whose header line names them and their rows), and every finished shard its shard
record, so a thread listing that folder knows how far the workers are on any runner, without a
metrics service. Each record file is read once; a listing holds a name a group, not an input."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import posixpath
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

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


def record_name(source: str) -> str:
    """The name of a unit's own result record in the temp folder (`unit_results.result_path`)."""
    return posixpath.basename(result_path("", source))


_RESULT_SUFFIX = "-" + record_name("").split("-", 1)[1]  # "-result.json"


def _name_hash(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _several(unit: WorkUnit) -> bool:
    """Whether the unit may be one of several of its input (a byte range, a dataset's row range)."""
    return bool(unit.path) or unit.format == FORMAT_HF


class UnitIndex:
    """Every unit of a run as the launcher's progress needs it, in arrays: the 64-bit hash of its
    record's name (sorted), its bytes, and for an input of several units (a file read in byte
    ranges, a --hf_dataset) the input's slot and its unit count: ~21 bytes a unit while the job runs,
    where a dict of record names to units and a count by input name took ~1 KB. Progress counts
    inputs as the summary does: an input is done when all its units are."""

    def __init__(self, units: Iterable[WorkUnit]) -> None:
        hashes, sizes = array("Q"), array("q")  # one pass over the units, which may be a stream
        several: list[tuple[int, str]] = []  # (place, input) of each unit that may be one of several
        for unit in units:
            if _several(unit):
                several.append((len(hashes), input_name(unit)))
            hashes.append(_name_hash(record_name(unit.source)))
            sizes.append(unit.size)
        n = len(hashes)
        hashes_np = np.frombuffer(hashes, dtype=np.uint64) if n else np.empty(0, np.uint64)
        order = np.argsort(hashes_np, kind="stable")
        self._hashes = hashes_np[order]
        self._sizes = (np.frombuffer(sizes, dtype=np.int64) if n else np.empty(0, np.int64))[order]
        del hashes, sizes, hashes_np
        parts = Counter(name for _, name in several)
        slot_of = {name: i for i, name in enumerate(sorted(name for name, k in parts.items() if k > 1))}
        slots = np.full(n, -1, dtype=np.int32)
        for place, name in several:
            slots[place] = slot_of.get(name, -1)
        self._slots = slots[order]
        self._need = np.array([parts[name] for name in slot_of], dtype=np.int32)
        self.units = n
        self.inputs = n - int(self._need.sum()) + len(self._need)
        self.bytes = int(self._sizes.sum())

    def find(self, name: str) -> int:
        """The place of the unit whose record is named `name`, or -1 (not one of this run's units)."""
        h = np.uint64(_name_hash(name))
        i = int(np.searchsorted(self._hashes, h))
        return i if i < self.units and self._hashes[i] == h else -1

    def size(self, i: int) -> int:
        return int(self._sizes[i])

    def slot(self, i: int) -> tuple[int, int]:
        """(the input's slot, its unit count), (-1, 1) for an input of one unit."""
        slot = int(self._slots[i])
        return (slot, int(self._need[slot])) if slot >= 0 else (-1, 1)

    @property
    def slots(self) -> int:
        return len(self._need)


class UnitProgress:
    """Polls the temp folder every `poll_seconds` on a daemon thread and feeds a ProgressReporter:
    inputs done of total, bytes read, rows written so far, shards written."""

    def __init__(self, units: Sequence[WorkUnit] | UnitIndex, temp_dir: str, *, every: float,
                 poll_seconds: float = 0.5, terminal: bool | None = None) -> None:
        self._temp_dir = temp_dir
        self._index = units if isinstance(units, UnitIndex) else UnitIndex(units)
        self._seen: set[str] = set()  # group record files read
        self.total = self._index.inputs
        self._marked = np.zeros(self._index.units, dtype=bool)  # units done
        self._finished = np.zeros(self._index.slots, dtype=np.int32)  # an input of many units: those done
        self._done = self._done_bytes = self._rows_made = 0
        self._shards = 0
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self.reporter = ProgressReporter(self.total, self._index.bytes, desc="preprocess", every=every,
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

    def _mark(self, i: int, rows: int) -> None:
        """Unit `i` of the index is done with `rows` rows (once: a later record of it changes nothing)."""
        if i < 0 or self._marked[i]:
            return
        self._marked[i] = True
        self._rows_made += rows
        self._done_bytes += self._index.size(i)
        slot, parts = self._index.slot(i)
        if slot < 0:
            self._done += 1
            return
        self._finished[slot] += 1
        if self._finished[slot] == parts:
            self._done += 1

    def refresh(self) -> None:
        """Look at the temp folder now (the thread looks every `poll_seconds`)."""
        self._poll()

    def _poll(self) -> None:
        names = temp_names(self._temp_dir)
        for name in names:
            if name.endswith(_RESULT_SUFFIX) and not name.endswith(GROUP_RECORD_SUFFIX):
                i = self._index.find(name)
                if i < 0 or self._marked[i]:
                    continue
                try:
                    record = json.loads(read_text(posixpath.join(self._temp_dir, name)))
                    self._mark(i, int(record["result"]["counts"].get(m.ROWS, 0)))
                except (ValueError, KeyError, OSError):
                    continue  # being written: counted at the next poll
            elif name.endswith(GROUP_RECORD_SUFFIX) and name not in self._seen:
                header = read_group_header(posixpath.join(self._temp_dir, name))
                if header is None:
                    continue  # being written (an object store's upload), or not one
                self._seen.add(name)
                for source, rows in zip(header["sources"], header.get("rows", ())):
                    self._mark(self._index.find(record_name(source)), int(rows))  # another run's: -1
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
            self.reporter.update(self.total, self._index.bytes, self._extra(rows))
        self.reporter.close()
