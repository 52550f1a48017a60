"""What a worker reports for one unit (`UnitResult`), and the records that mark a unit done for
--resume, next to its part files (named from a hash of the source, never from its own name)."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import asdict, dataclass, field, fields

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


def _unpickled_result(*values) -> UnitResult:
    result = UnitResult(*values)
    if isinstance(result.counts, tuple):
        result.counts = dict(zip(_COUNT_NAMES, result.counts))
    return result


def result_path(temp_dir: str, source: str) -> str:
    return part_path(temp_dir, source, "result").replace(".arrow", ".json")


def save_result(temp_dir: str, unit: WorkUnit, result: UnitResult) -> None:
    """Written after the unit's parts are in place: its presence marks the unit done (for --resume)."""
    record = {"identity": unit.identity, "result": asdict(result)}
    write_text(result_path(temp_dir, unit.source), json.dumps(record, sort_keys=True))


def load_result(temp_dir: str, unit: WorkUnit) -> UnitResult | None:
    """A finished unit's result from an interrupted run, if the input is unchanged and its parts exist."""
    path = result_path(temp_dir, unit.source)
    if not FileSystems.exists(path):
        return None
    try:
        record = json.loads(read_text(path))
        result = UnitResult(**record["result"])
        result.parts = {split: (p, rows) for split, (p, rows) in result.parts.items()}
    except (ValueError, KeyError, TypeError):
        return None
    if record["identity"] != unit.identity or not all(FileSystems.exists(p) for p, _ in result.parts.values()):
        return None
    return result


def part_path(temp_dir: str, source: str, split: str) -> str:
    """The path of a unit's part of `split`."""
    return f"{unit_file_stem(temp_dir, source)}-{split}.arrow"


def unit_file_stem(temp_dir: str, source: str) -> str:
    """Where a unit's temporary files go: a name from a hash of the source, never the input's own name."""
    name = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return posixpath.join(temp_dir, name)
