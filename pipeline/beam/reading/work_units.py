"""Find inputs: work units from `--input` patterns (local ones listed by `inputs.listing`, others
through Beam's FileSystems), split plans, and `datasets` row ranges (`inputs.hf`). Reading a unit
is `reader.py` with the per-format readers of `pipeline.beam.reading.formats`."""

from __future__ import annotations

import dataclasses
import os
import posixpath
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.byte_ranges import range_source, starts_utf16
from pipeline.beam.reading.compression import COMPRESSED_SUFFIXES, SNIFF_BYTES, is_compressed, sniffed_suffix
from pipeline.beam.reading.formats.hf import hf_revision, load_hf_dataset
from pipeline.beam.reading.listing import GLOB_CHARS, InputError, list_local
from pipeline.console.preflight import no_input_message

FORMAT_TEXT = "text"
FORMAT_JSONL = "jsonl"
FORMAT_PARQUET = "parquet"
FORMAT_HF = "hf_dataset"
HF_ROWS_PER_UNIT = 20_000

__all__ = ["FORMAT_TEXT", "FORMAT_JSONL", "FORMAT_PARQUET", "FORMAT_HF", "COMPRESSED_SUFFIXES", "InputError",
           "WorkUnit", "split_large_inputs", "outside", "unsplittable_inputs", "input_format", "expand_inputs",
           "load_hf_dataset", "hf_revision", "hf_units", "HF_ROWS_PER_UNIT"]


@dataclass(frozen=True, order=True)
class WorkUnit:
    """One element of work: a file, or a row range of a `datasets` dataset."""

    source: str  # a path, or "hf://NAME?split=SPLIT&rows=START-STOP" for dataset ranges
    format: str
    size: int = 0
    hf_name: str = ""
    hf_split: str = ""
    start: int = 0
    stop: int = 0
    modified: float = 0.0  # last-modified time from the filesystem, part of the identity --resume checks
    path: str = ""  # the file a byte range (start, stop) of a large .jsonl comes from; "" for whole files
    revision: str = ""  # a --hf_dataset's Hub commit or local fingerprint
    split_bytes: int = 0  # a large uncompressed text file: scanned, then tokenized in ranges of this size
    refused: str = ""  # listed but never opened (a link out of the input folder): the skip reason

    @property
    def file(self) -> str:
        """The file this unit reads (a byte range's file; a dataset range's source)."""
        return self.path or self.source

    @property
    def identity(self) -> str:
        return f"{self.source}|{self.size}|{self.modified}" + (f"|{self.revision}" if self.revision else "")


def split_large_inputs(units: list[WorkUnit], split_bytes: int, split_text: bool = True) -> list[WorkUnit]:
    """Spread uncompressed files larger than `split_bytes` over many workers: a .jsonl file is cut
    into byte ranges here (a line belongs to the range holding its first byte); a text file is
    marked, and its ranges are cut at paragraph breaks by the worker that scans it (see input_splits.py),
    unless `split_text` is False (a tokenizer whose text has no proven cut: each range would read
    to the document's end). Compressed files cannot be split (a suffix or a signature says so): one
    worker streams each; nor can UTF-16 ones (two-byte newlines)."""
    out = []
    for unit in units:
        if (is_compressed(unit.source) or unit.size <= split_bytes or unit.refused
                or unit.format not in (FORMAT_JSONL, FORMAT_TEXT)
                or (unit.format == FORMAT_JSONL and starts_utf16(unit.source)) or compressed_content(unit.source)):
            out.append(unit)
        elif unit.format == FORMAT_TEXT:
            out.append(dataclasses.replace(unit, split_bytes=split_bytes) if split_text else unit)
        else:
            for start in range(0, unit.size, split_bytes):
                stop = min(start + split_bytes, unit.size)
                out.append(WorkUnit(source=range_source(unit.source, start, stop), format=FORMAT_JSONL,
                                    size=stop - start, start=start, stop=stop, modified=unit.modified,
                                    path=unit.source))
    return out


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


def input_format(path: str) -> str:
    """The format of a file from its name, compression suffix ignored."""
    name = path.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return FORMAT_JSONL
    if name.endswith(".parquet"):
        return FORMAT_PARQUET
    return FORMAT_TEXT


def _match(pattern: str) -> list:
    results = FileSystems.match([pattern])
    return [m for result in results for m in result.metadata_list]


def _listed(pattern: str) -> list[tuple[str, int, float, str]]:
    """(path, size, modified, refused) of each entry a pattern names."""
    if "://" not in pattern:
        return [(e.path, e.size, e.modified, e.refused) for e in list_local(pattern)]
    matches = []
    if not GLOB_CHARS & set(pattern):
        # A literal path: a directory (or object prefix) if anything lies below it, else a file.
        matches = _match(posixpath.join(pattern.rstrip("/"), "**"))
    if not matches:
        matches = _match(pattern)
    return [(meta.path, meta.size_in_bytes, float(meta.last_updated_in_seconds or 0.0), "") for meta in matches]


def expand_inputs(patterns: list[str]) -> list[WorkUnit]:
    """Files named by paths, directories (recursively) and globs, deduplicated and sorted by path.
    A directory is never an input: one a glob matches brings its files. Local entries Beam's
    listing would drop (broken links, FIFOs) are units whose reading reports why; links out of
    the input folder are units refused without being opened (see `inputs.listing`).

    Raises:
        InputError: naming the first pattern that matches no file (an empty folder included).
    """
    found: dict[str, tuple[int, float, str]] = {}
    for pattern in patterns:
        try:
            entries = _listed(pattern)
        except Exception as error:  # Beam raises BeamIOError and others for bad patterns
            raise InputError(f"--input {pattern!r}: cannot be listed ({error})") from error
        if not entries:
            raise InputError(no_input_message(pattern))
        for path, size, modified, refused in entries:
            found[path] = (size, modified, refused)
    return [WorkUnit(source=path, format=input_format(path), size=size, modified=modified, refused=refused)
            for path, (size, modified, refused) in sorted(found.items())]


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
