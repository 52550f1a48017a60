"""Work units: what one worker reads at a time (a file, a byte range of whole lines of a large
`.jsonl` file, a row range of a `datasets` dataset), from `--input` patterns (local ones listed by
`reading.listing`, others through Beam's FileSystems) and `--hf_dataset`. Each unit's format is the
registry's (`reading.formats.registry`); reading a unit is `reading.reader`."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import os
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.byte_ranges import line_range_source, starts_utf16
from pipeline.beam.reading.compression import COMPRESSED_SUFFIXES, SNIFF_BYTES, is_compressed, sniffed_suffix
from pipeline.beam.reading.formats.hf import hf_revision, load_hf_dataset
from pipeline.beam.reading.formats.registry import (
    FORMAT_HF,
    FORMAT_JSONL,
    FORMAT_PARQUET,
    FORMAT_TEXT,
    SPREAD_INPUT_SPLITS,
    SPREAD_LINE_RANGES,
    SPREAD_NONE,
    format_of_path,
    input_format,
)
from pipeline.beam.reading.listing import GLOB_CHARS, InputError, iter_local
from pipeline.console.preflight import no_input_message
from schemas.options import DEFAULT_GROUP_INPUTS, GROUPED_INPUT_BYTES

HF_ROWS_PER_UNIT = 20_000

# The format names and hf helpers are the registry's and formats.hf's, named here too for the callers
# that build or inspect units.
__all__ = ["FORMAT_TEXT", "FORMAT_JSONL", "FORMAT_PARQUET", "FORMAT_HF", "COMPRESSED_SUFFIXES", "InputError",
           "WorkUnit", "split_large_inputs", "iter_split_large_inputs", "pattern_units", "merged_units",
           "iter_groups", "group_size", "outside", "unsplittable_inputs", "expand_inputs",
           "load_hf_dataset", "hf_revision", "hf_units", "HF_ROWS_PER_UNIT", "UnitGroup", "group_units", "groupable",
           "GROUPED_INPUT_BYTES", "DEFAULT_GROUP_INPUTS"]


@dataclass(frozen=True, order=True, slots=True)
class WorkUnit:
    """One element of work: a file, a line range of a large file (`path`, `start`, `stop`), or a row
    range of a `datasets` dataset (`hf_name`, `hf_split`, `start`, `stop`). With slots: a listing of a
    million units is held by the launcher and a lister (~260 bytes a unit, ~600 with a dict each)."""

    source: str  # a path, or "hf://NAME?split=SPLIT&rows=START-STOP" for dataset ranges
    format: str
    size: int = 0
    hf_name: str = ""
    hf_split: str = ""
    start: int = 0
    stop: int = 0
    modified: float = 0.0  # last-modified time from the filesystem, part of the identity --resume checks
    path: str = ""  # a line range's file (the range is bytes [start, stop) of it); "" for whole files
    revision: str = ""  # a --hf_dataset's Hub commit or local fingerprint
    split_bytes: int = 0  # a large uncompressed text file: scanned, then tokenized in input splits of this size
    refused: str = ""  # listed but never opened (a link out of the input folder): the skip reason

    @property
    def file(self) -> str:
        """The file this unit reads (a byte range's file; a dataset range's source)."""
        return self.path or self.source

    @property
    def identity(self) -> str:
        return f"{self.source}|{self.size}|{self.modified}" + (f"|{self.revision}" if self.revision else "")


def split_large_inputs(units: list[WorkUnit], split_bytes: int, split_text: bool = True) -> list[WorkUnit]:
    """Spread uncompressed files larger than `split_bytes` over many workers, as their format's
    `spread` says: a .jsonl file is cut into byte ranges of whole lines here (a line belongs to the
    range holding its first byte); a text file is marked, and its input splits are cut at paragraph
    breaks by the worker that scans it (`pipeline.beam.input_splits`), unless `split_text` is False
    (a tokenizer whose text has no proven cut: each split would read to the document's end).
    Compressed files cannot be split (a suffix or a signature says so): one worker streams each;
    nor can a UTF-16 file be cut into line ranges (two-byte newlines)."""
    return list(iter_split_large_inputs(units, split_bytes, split_text))


def iter_split_large_inputs(units: Iterable[WorkUnit], split_bytes: int, split_text: bool = True
                            ) -> Iterator[WorkUnit]:
    """`split_large_inputs` unit by unit, for a listing that is never held whole."""
    for unit in units:
        spread = _spread(unit, split_bytes)
        if spread == SPREAD_INPUT_SPLITS:
            yield dataclasses.replace(unit, split_bytes=split_bytes) if split_text else unit
        elif spread == SPREAD_LINE_RANGES:
            yield from _line_ranges(unit, split_bytes)
        else:
            yield unit


def _spread(unit: WorkUnit, split_bytes: int) -> str:
    """How `unit` is spread over workers: its format's way, if it is a large uncompressed file."""
    spread = input_format(unit.format).spread
    if spread == SPREAD_NONE or unit.size <= split_bytes or unit.refused or is_compressed(unit.source):
        return SPREAD_NONE
    if spread == SPREAD_LINE_RANGES and starts_utf16(unit.source):
        return SPREAD_NONE
    return SPREAD_NONE if compressed_content(unit.source) else spread


def _line_ranges(unit: WorkUnit, split_bytes: int) -> list[WorkUnit]:
    """The units of a large file's byte ranges of whole lines, `split_bytes` each."""
    return [WorkUnit(source=line_range_source(unit.source, start, min(start + split_bytes, unit.size)),
                     format=unit.format, size=min(start + split_bytes, unit.size) - start, start=start,
                     stop=min(start + split_bytes, unit.size), modified=unit.modified, path=unit.source)
            for start in range(0, unit.size, split_bytes)]


def compressed_content(path: str) -> bool:
    """Whether a file without a compression suffix starts with a compression's signature (it is
    read decompressed, so it cannot be split); one small read, done for large files only."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return bool(sniffed_suffix(handle.read(SNIFF_BYTES)))
    except OSError:
        return False  # unreadable: reading it says why


def outside(units: list[WorkUnit], folder: str) -> list[WorkUnit]:
    """The units not inside `folder` (the output: an --input folder holding it must not read the
    job's own temporary files and shards)."""
    def resolved(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    prefix = resolved(folder).rstrip("/") + "/"
    return [u for u in units if not resolved(u.path or u.source).startswith(prefix)]


def unsplittable_inputs(units: list[WorkUnit], split_bytes: int) -> list[WorkUnit]:
    """Compressed inputs over `split_bytes`: each is streamed by a single worker."""
    return [u for u in units if u.size > split_bytes and is_compressed(u.source)]


def _match(pattern: str) -> list:
    results = FileSystems.match([pattern])
    return [m for result in results for m in result.metadata_list]


def _listed(pattern: str) -> Iterator[tuple[str, int, float, str]]:
    """(path, size, modified, refused) of each entry a pattern names, in path order: a local
    pattern's as its folders are read (`listing.iter_local`), another's from Beam's match (a list)."""
    if "://" not in pattern:
        return ((e.path, e.size, e.modified, e.refused) for e in iter_local(pattern))
    matches = []
    if not GLOB_CHARS & set(pattern):
        # A literal path: a directory (or object prefix) if anything lies below it, else a file.
        matches = _match(posixpath.join(pattern.rstrip("/"), "**"))
    if not matches:
        matches = _match(pattern)
    return iter(sorted((meta.path, meta.size_in_bytes, float(meta.last_updated_in_seconds or 0.0), "")
                       for meta in matches))


def pattern_units(pattern: str) -> Iterator[WorkUnit]:
    """The units of one pattern's files, in path order, as they are listed.

    Raises:
        InputError: the pattern cannot be listed, or matches no file (an empty folder included);
            raised here, before any unit is yielded.
    """
    try:
        entries = _listed(pattern)
        first = next(entries, None)
    except Exception as error:  # Beam raises BeamIOError and others for bad patterns
        raise InputError(f"--input {pattern!r}: cannot be listed ({error})") from error
    if first is None:
        raise InputError(no_input_message(pattern))
    return (WorkUnit(source=path, format=format_of_path(path).name, size=size, modified=modified, refused=refused)
            for path, size, modified, refused in itertools.chain([first], entries))


def merged_units(streams: Iterable[Iterable[WorkUnit]]) -> Iterator[WorkUnit]:
    """Streams of units in path order merged into one in path order, a path two streams hold once."""
    last = None
    for unit in heapq.merge(*streams, key=lambda u: u.source):
        if unit.source != last:
            last = unit.source
            yield unit


def expand_inputs(patterns: list[str]) -> list[WorkUnit]:
    """Files named by paths, directories (recursively) and globs, deduplicated and sorted by path.
    A directory is never an input: one a glob matches brings its files. Local entries Beam's
    listing would drop (broken links, FIFOs) are units whose reading reports why; links out of
    the input folder are units refused without being opened (see `reading.listing`).

    Raises:
        InputError: naming the first pattern that matches no file (an empty folder included).
    """
    return list(merged_units([pattern_units(pattern) for pattern in patterns]))


def hf_units(name: str, split: str, text_column: str, revision: str = "") -> list[WorkUnit]:
    """Row ranges of a `datasets` dataset, checked for the text column.

    Raises:
        InputError: when the dataset cannot be loaded or lacks the column.
    """
    try:
        dataset = load_hf_dataset(name, split, revision)
    except Exception as error:  # datasets raises many types for missing or unreachable datasets
        raise InputError(f"--hf_dataset {name!r} split {split!r} cannot be loaded: {error}") from error
    if text_column not in dataset.column_names:
        raise InputError(f"--hf_dataset {name!r} has no column {text_column!r} (columns: {dataset.column_names})")
    return [
        WorkUnit(source=f"hf://{name}?split={split}&rows={start}-{min(start + HF_ROWS_PER_UNIT, len(dataset))}",
                 format=FORMAT_HF, hf_name=name, hf_split=split, start=start,
                 stop=min(start + HF_ROWS_PER_UNIT, len(dataset)), revision=revision)
        for start in range(0, len(dataset), HF_ROWS_PER_UNIT)
    ]


# A whole file of at most GROUPED_INPUT_BYTES may share a work unit (and a pair of part files) with
# its neighbours, DEFAULT_GROUP_INPUTS of them by default (schemas.options: the command line's too).


@dataclass(frozen=True, order=True)
class UnitGroup:
    """Small whole files, consecutive by path, read by one worker call that writes one train and
    one validation part for all of them (`pipeline.beam.unit_groups`); each still has its own
    result, skip reason and --resume record."""

    units: tuple[WorkUnit, ...]

    @property
    def source(self) -> str:
        """The group's name where one is needed (its first input's path: balancing ties, messages)."""
        return self.units[0].source

    @property
    def size(self) -> int:
        return sum(unit.size for unit in self.units)


def groupable(unit: WorkUnit) -> bool:
    """A small whole file of a file format (never a byte range, an input split or a dataset range)."""
    return (isinstance(unit, WorkUnit) and not unit.path and not unit.split_bytes and unit.format != FORMAT_HF
            and unit.size <= GROUPED_INPUT_BYTES)


def group_units(units: list[WorkUnit], max_inputs: int, max_bytes: int,
                n_bins: int | None = None) -> list[WorkUnit | UnitGroup]:
    """Small whole files in groups of consecutive paths, up to `max_inputs` inputs and `max_bytes`
    bytes each, and (when `n_bins` workers share them) at least 4 groups a worker while there are
    inputs enough; every other unit stays alone. `max_inputs` 1: no groups. The output does not
    depend on the groups (each input's rows are its own, wherever they are written)."""
    small = sorted((u for u in units if groupable(u)), key=lambda u: u.source)
    out: list[WorkUnit | UnitGroup] = [u for u in units if not groupable(u)]
    return out + list(iter_groups(small, group_size(max_inputs, len(small), n_bins), max_bytes))


def group_size(max_inputs: int, small_inputs: int, n_bins: int | None) -> int:
    """Inputs a group: `max_inputs`, less when `n_bins` workers would get fewer than 4 groups each
    of `small_inputs`."""
    return min(max_inputs, max(1, -(-small_inputs // (4 * n_bins)))) if n_bins else max_inputs


def iter_groups(units: Iterable[WorkUnit], max_inputs: int, max_bytes: int) -> Iterator[WorkUnit | UnitGroup]:
    """`units` (in path order) with their small whole files in groups of consecutive ones, up to
    `max_inputs` inputs and `max_bytes` bytes each (`max_inputs` 1: none), as they come; every other
    unit as it is."""
    group: list[WorkUnit] = []
    size = 0
    for unit in units:
        if max_inputs <= 1 or not groupable(unit):
            yield unit
            continue
        if group and (len(group) >= max_inputs or size + unit.size > max_bytes):
            yield UnitGroup(tuple(group)) if len(group) > 1 else group[0]
            group, size = [], 0
        group.append(unit)
        size += unit.size
    if group:
        yield UnitGroup(tuple(group)) if len(group) > 1 else group[0]
