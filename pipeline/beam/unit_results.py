"""What a worker reports for one unit (`UnitResult`), and the records that mark a unit done for
--resume, next to its part files (named from a hash of the source, never from its own name).

A unit alone (a large input, a byte range) has a record file of its own (`save_result`). A group of
small inputs (`unit_groups`) writes one record file for all its members (`save_group_results`):
a header line (its members' sources, identities and rows, and every part they point to) and one
line per member's record. One file a group, not one an input: a million small inputs made a million
record files, each a create, a rename and a GIL hand-over on a worker, one more name in every listing of
the progress thread and one more unlink when the temp folder goes. A resumed run finds a member's record
wherever an earlier run's grouping put it (`ResultIndex`: the headers only, 16 bytes an input).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.writing.arrow_io import read_text, write_text
from pipeline.kernels.text.quality import dominant_script
from schemas import manifest as m

_COUNT_NAMES = m.INPUT_COUNT_NAMES  # the counts every unit reports, in the order units make them


@dataclass
class UnitResult:
    """What a worker reports for one unit; the manifest is built only from these and shard results."""

    source: str
    size: int = 0  # bytes of the input (of its range) when it was read
    key: str = ""
    skip_reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    records_skipped: dict[str, int] = field(default_factory=dict)
    parts: dict[str, tuple[str, int]] = field(default_factory=dict)  # split -> (part path, rows)
    # split -> the row of its part where its rows start: a group of small inputs shares one pair of
    # parts, each input's rows after the previous input's (absent: row 0, the unit's own part)
    part_starts: dict[str, int] = field(default_factory=dict)
    duplicate_of: str | None = None  # the first input (by path) with the same content
    unk_fraction: float | None = None  # share of [UNK] among its content tokens (None: not tokenized)
    scripts: dict[str, float] = field(default_factory=dict)  # share of its letters per Unicode script
    signature: str = ""  # MinHash signature of its word bigrams, hex (near-duplicate detection)
    near_duplicate_of: str | None = None  # the earliest input (by path) of its near-duplicate cluster
    similarity: float | None = None  # estimated similarity to near_duplicate_of
    file: str = ""  # a byte range's file (its WorkUnit.path): ranges of one file are one input for dedup

    @property
    def input(self) -> str:
        """The input this result is (part of): its file for a byte range, else its source."""
        return self.file or self.source

    @property
    def dominant_script(self) -> str:
        return dominant_script(self.scripts)

    @property
    def sort_key(self) -> tuple[str, str]:
        """Row order of the output: by content key, then source (ties are identical content)."""
        return (self.key, self.source)

    def __reduce__(self):
        """Pickled as its values in field order, the usual counts as values alone: a result is an
        element between most steps of the job, each held in memory by the local runner (690 bytes
        pickled with every field's and count's name, about 330 without)."""
        values = [getattr(self, name) for name in _FIELD_NAMES]
        counts = self.counts
        if tuple(counts) == _COUNT_NAMES:
            values[_COUNTS_AT] = tuple(counts.values())
        return _unpickled_result, tuple(values)


_FIELD_NAMES = tuple(f.name for f in fields(UnitResult))
_COUNTS_AT = _FIELD_NAMES.index("counts")


def _fields_of(result: UnitResult) -> dict:
    """The result's fields by name, for JSON (what dataclasses.asdict gives, without its deep copy of
    every nested dict: a tenth of a small input's record time)."""
    return {name: getattr(result, name) for name in _FIELD_NAMES}


def _unpickled_result(*values) -> UnitResult:
    result = UnitResult(*values)
    if isinstance(result.counts, tuple):
        result.counts = dict(zip(_COUNT_NAMES, result.counts))
    return result


def result_path(temp_dir: str, source: str) -> str:
    return part_path(temp_dir, source, "result").replace(".arrow", ".json")


def save_result(temp_dir: str, unit: WorkUnit, result: UnitResult) -> None:
    """Written after the unit's parts are in place: its presence marks the unit done (for --resume)."""
    record = {"identity": unit.identity, "result": _fields_of(result)}
    write_text(result_path(temp_dir, unit.source), json.dumps(record, sort_keys=True))


def load_result(temp_dir: str, unit: WorkUnit) -> UnitResult | None:
    """A finished unit's result from an interrupted run, if the input is unchanged and its parts exist."""
    path = result_path(temp_dir, unit.source)
    if not FileSystems.exists(path):
        return None
    try:
        record = json.loads(read_text(path))
    except ValueError:
        return None
    return _reusable(record, unit, {})


def _reusable(record: object, unit: WorkUnit, exists: dict[str, bool]) -> UnitResult | None:
    """The result of `record` if it is `unit`'s (the same identity: the input unchanged) and its parts
    exist (`exists` caches the checks: a group's members share their parts)."""
    try:
        if record["identity"] != unit.identity:
            return None
        result = UnitResult(**record["result"])
        result.parts = {split: (p, rows) for split, (p, rows) in result.parts.items()}
    except (KeyError, TypeError, ValueError):
        return None
    for p, _ in result.parts.values():
        if p not in exists:
            exists[p] = FileSystems.exists(p)
        if not exists[p]:
            return None
    return result


GROUP_RECORD_SUFFIX = "-group-result.json"  # ends like a unit's record: a glob for records finds both
_HEADER = "sources"


def group_record_path(temp_dir: str, group_name: str) -> str:
    """The record file of a group of inputs (`group_name`: unit_groups.group_part_name of its members)."""
    return f"{unit_file_stem(temp_dir, group_name)}{GROUP_RECORD_SUFFIX}"


def save_group_results(temp_dir: str, group_name: str, done: Sequence[tuple[WorkUnit, UnitResult]]) -> None:
    """One record file for a group's members, written after their parts are in place (its presence
    marks them done). Lines: the header (sources, identities, rows, the parts they point to), then
    one record a member in the header's order (JSON escapes every newline: a record is one line)."""
    parts = sorted({p for _, result in done for p, _ in result.parts.values()})
    header = {_HEADER: [unit.source for unit, _ in done], "identities": [unit.identity for unit, _ in done],
              "rows": [int(result.counts.get(m.ROWS, 0)) for _, result in done], "parts": parts}
    lines = [json.dumps(header, sort_keys=True)]
    lines += [json.dumps({"identity": unit.identity, "result": _fields_of(result)}, sort_keys=True)
              for unit, result in done]
    write_text(group_record_path(temp_dir, group_name), "\n".join(lines) + "\n")


def read_group_header(path: str) -> dict | None:
    """The header of a group record file (None: not one, or unreadable: it is being written or gone)."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            header = json.loads(handle.readline().decode("utf-8"))
    except Exception:  # noqa: BLE001 - not JSON, or gone: Beam's filesystems raise BeamIOError (and others)
        return None
    if not isinstance(header, dict) or not isinstance(header.get(_HEADER), list):
        return None
    return header


def list_names(folder: str) -> list[str]:
    """The names of the files in `folder` ([] while it does not exist). A local folder is listed
    without Beam, whose match stats every file."""
    try:
        if "://" not in folder or folder.startswith("file://"):
            return os.listdir(folder.removeprefix("file://"))
        return [posixpath.basename(md.path) for md in FileSystems.match([posixpath.join(folder, "*")])[0].metadata_list]
    except Exception:  # noqa: BLE001 - the folder may not exist yet, or a listing may fail transiently
        return []


def _group_files(temp_dir: str) -> list[tuple[str, float]]:
    """(name, modification time) of each group record file in `temp_dir`."""
    if "://" not in temp_dir or temp_dir.startswith("file://"):
        local = temp_dir.removeprefix("file://")
        out = []
        for name in list_names(temp_dir):
            if name.endswith(GROUP_RECORD_SUFFIX):
                try:
                    out.append((name, os.stat(os.path.join(local, name)).st_mtime_ns / 1e9))
                except OSError:
                    continue  # gone since the listing
        return out
    try:
        found = FileSystems.match([posixpath.join(temp_dir, "*" + GROUP_RECORD_SUFFIX)])[0].metadata_list
    except Exception:  # noqa: BLE001 - the folder may not exist yet, or a listing may fail transiently
        return []
    return [(posixpath.basename(md.path), float(md.last_updated_in_seconds or 0)) for md in found]


def _source_hashes(sources: Iterable[str]) -> np.ndarray:
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                       "little") for s in sources), dtype=np.uint64)


RECENT_GROUP_FILES = 4  # group record files the signatures' index keeps read (~5 MB each at 1,000 records)


class ResultIndex:
    """Where each member record of the group record files in a temp folder lies, read from their
    headers when built: sorted 64-bit hashes of the sources with each one's file and line (16 bytes
    an input; a hit is checked against the record's own source). Records written after it was built
    are not in it: a fresh run's lookups miss, as they should; a resumed run's find the earlier run's.

    With `keep_recent`, the last that many files read are kept, split in lines: the near-duplicate
    candidates' signatures are looked up one input at a time (`read_record`), and a pair's inputs are
    mostly in files the pairs before it read (50,000 near copies of one text read the first input's
    group file 100,000 times, ~14 ms a pair). A resumed run's lookups ask for a group at a time: each
    file is read once a call anyway."""

    def __init__(self, temp_dir: str, keep_recent: int = 0) -> None:
        self.temp_dir = temp_dir
        self._keep_recent = keep_recent
        self._recent: OrderedDict[int, list[str]] = OrderedDict()
        self._recent_lock = threading.Lock()
        # Newest first: an input redone by a resumed run in another grouping is in two files, and the
        # newer record is the one of its content now (the older may be of the input before it changed).
        self.files = [name for name, _ in sorted(_group_files(temp_dir), key=lambda nm: (-nm[1], nm[0]))]
        hashes, files, lines = [], [], []
        for number, name in enumerate(self.files):
            header = read_group_header(posixpath.join(temp_dir, name))
            if header is None:
                continue
            hashes.append(_source_hashes(header[_HEADER]))
            files.append(np.full(len(header[_HEADER]), number, dtype=np.uint32))
            lines.append(np.arange(1, len(header[_HEADER]) + 1, dtype=np.uint32))
        hashes_all = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        order = np.argsort(hashes_all, kind="stable")  # stable: a source's newest file first
        self._hashes = hashes_all[order]
        self._file = (np.concatenate(files) if files else np.zeros(0, np.uint32))[order]
        self._line = (np.concatenate(lines) if lines else np.zeros(0, np.uint32))[order]

    def __len__(self) -> int:
        return len(self._hashes)

    def records(self, sources: Sequence[str]) -> dict[str, dict]:
        """The records of those of `sources` in the index (each group file read once)."""
        if not len(self._hashes) or not sources:
            return {}
        wanted = _source_hashes(sources)
        at = np.minimum(np.searchsorted(self._hashes, wanted), len(self._hashes) - 1)
        where: dict[int, list[tuple[str, int]]] = {}
        for source, i, hit in zip(sources, at.tolist(), (self._hashes[at] == wanted).tolist()):
            if hit:
                where.setdefault(int(self._file[i]), []).append((source, int(self._line[i])))
        found: dict[str, dict] = {}
        for number, wanted_lines in where.items():
            lines = self._file_lines(number)
            if lines is None:
                continue
            for source, line in wanted_lines:
                try:
                    record = json.loads(lines[line])
                    if record["result"]["source"] == source:
                        found[source] = record
                except (IndexError, ValueError, KeyError, TypeError):
                    continue
        return found


    def _file_lines(self, number: int) -> list[str] | None:
        """The lines of group record file `number` (kept among the recent ones); None when it is gone."""
        with self._recent_lock:
            lines = self._recent.get(number)
            if lines is not None:
                self._recent.move_to_end(number)
                return lines
        try:
            lines = read_text(posixpath.join(self.temp_dir, self.files[number])).split("\n")
        except Exception:  # noqa: BLE001 - gone since (another run's folder): not found
            return None
        with self._recent_lock:
            self._recent[number] = lines
            while len(self._recent) > self._keep_recent:
                self._recent.popitem(last=False)
        return lines


_INDEXES: dict[int, tuple[weakref.ref, ResultIndex]] = {}


def load_group_results(temp_dir: str, units: Sequence[WorkUnit], owner: object = None
                       ) -> dict[str, UnitResult | None]:
    """Each unit's result from an earlier (interrupted) run where its record lies in any group's record
    file, the input unchanged and its parts there; else None. The index is built once for `owner` (a
    worker's UnitContext: one job run) at its first call, so a whole run costs one read of the headers
    and none per input; without an owner, for this call alone."""
    if owner is None:
        index = ResultIndex(temp_dir)
    else:
        key = id(owner)
        cached = _INDEXES.get(key)
        if cached is None or cached[0]() is not owner or cached[1].temp_dir != temp_dir:
            for stale in [k for k, (ref, _) in _INDEXES.items() if ref() is None]:
                del _INDEXES[stale]
            cached = (weakref.ref(owner), ResultIndex(temp_dir))
            _INDEXES[key] = cached
        index = cached[1]
    records = index.records([unit.source for unit in units])
    exists: dict[str, bool] = {}
    return {unit.source: (_reusable(records[unit.source], unit, exists) if unit.source in records else None)
            for unit in units}


def read_record(temp_dir: str, source: str) -> dict:
    """The record of input `source` (its unit's own record file, or its group's), for what only the
    record keeps (its MinHash signature). Read once all records are written (the group files are
    indexed at the call).

    Raises:
        OSError: no record of `source` in `temp_dir`.
    """
    path = result_path(temp_dir, source)
    if FileSystems.exists(path):
        return json.loads(read_text(path))
    cached = _SIGNATURE_INDEX.get(temp_dir)
    for _ in range(2):  # a cached index may predate the record (or be another run's): built again once
        if cached is None:
            cached = ResultIndex(temp_dir, keep_recent=RECENT_GROUP_FILES)
            _SIGNATURE_INDEX.clear()  # one job's at a time: an earlier job's files are not kept read
            _SIGNATURE_INDEX[temp_dir] = cached
        record = cached.records([source]).get(source)
        if record is not None:
            return record
        cached = None
    raise FileNotFoundError(f"no record of {source} in {path} or any group record file of {temp_dir}")


_SIGNATURE_INDEX: dict[str, ResultIndex] = {}  # per temp folder; rebuilt when a lookup misses


def part_path(temp_dir: str, source: str, split: str) -> str:
    """The path of a unit's part of `split`."""
    return f"{unit_file_stem(temp_dir, source)}-{split}.arrow"


def unit_file_stem(temp_dir: str, source: str) -> str:
    """Where a unit's temporary files go: a name from a hash of the source, never the input's own name."""
    name = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return posixpath.join(temp_dir, name)
