"""Find inputs through Beam's FileSystems: work units, listing, split plans and `datasets` row ranges.
(Reading a unit is streams.py.)"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import posixpath
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

FORMAT_TEXT = "text"
FORMAT_JSONL = "jsonl"
FORMAT_PARQUET = "parquet"
FORMAT_HF = "hf_dataset"
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".zst", ".zstd", ".deflate", ".xz", ".lzma")
_GLOB_CHARS = set("*?[")
HF_ROWS_PER_UNIT = 20_000


class InputError(ValueError):
    """An `--input` pattern matched nothing, or an input option is inconsistent."""


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

    @property
    def identity(self) -> str:
        return f"{self.source}|{self.size}|{self.modified}" + (f"|{self.revision}" if self.revision else "")


def split_large_inputs(units: list[WorkUnit], split_bytes: int) -> list[WorkUnit]:
    """Spread uncompressed files larger than `split_bytes` over many workers: a .jsonl file is cut
    into byte ranges here (a line belongs to the range holding its first byte); a text file is
    marked, and its ranges are cut at paragraph breaks by the worker that scans it (see ranges.py).
    Compressed files cannot be split: one worker streams each."""
    out = []
    for unit in units:
        compressed = unit.source.lower().endswith(COMPRESSED_SUFFIXES)
        if compressed or unit.size <= split_bytes or unit.format not in (FORMAT_JSONL, FORMAT_TEXT):
            out.append(unit)
        elif unit.format == FORMAT_TEXT:
            out.append(dataclasses.replace(unit, split_bytes=split_bytes))
        else:
            for start in range(0, unit.size, split_bytes):
                stop = min(start + split_bytes, unit.size)
                out.append(WorkUnit(source=f"{unit.source}@{start}-{stop}", format=FORMAT_JSONL, size=stop - start,
                                    start=start, stop=stop, modified=unit.modified, path=unit.source))
    return out


def outside(units: list[WorkUnit], folder: str) -> list[WorkUnit]:
    """The units not inside `folder` (the output: an --input folder holding it must not read the
    job's own temporary files and shards)."""
    def resolved(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    prefix = resolved(folder).rstrip("/") + "/"
    return [u for u in units if not resolved(u.path or u.source).startswith(prefix)]


def unsplittable_inputs(units: list[WorkUnit], split_bytes: int) -> list[WorkUnit]:
    """Compressed inputs over `split_bytes`: each is streamed by a single worker."""
    return [u for u in units if u.size > split_bytes and u.source.lower().endswith(COMPRESSED_SUFFIXES)]


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


def expand_inputs(patterns: list[str]) -> list[WorkUnit]:
    """Files named by paths, directories (recursively) and globs, deduplicated and sorted by path.

    Raises:
        InputError: naming the first pattern that matches no file.
    """
    found: dict[str, tuple[int, float]] = {}
    for pattern in patterns:
        matches = []
        if not _GLOB_CHARS & set(pattern):
            # A literal path: a directory (or object prefix) if anything lies below it, else a file.
            matches = _match(posixpath.join(pattern.rstrip("/"), "**"))
        if not matches:
            try:
                matches = _match(pattern)
            except Exception as error:  # Beam raises BeamIOError and others for bad patterns
                raise InputError(f"--input {pattern!r}: cannot be listed ({error})") from error
        unlisted = _unlisted_local_entries(pattern, {meta.path for meta in matches})
        if not matches and not unlisted:
            raise InputError(f"--input {pattern!r} matches no file")
        for meta in matches:
            found[meta.path] = (meta.size_in_bytes, float(meta.last_updated_in_seconds or 0.0))
        for path in unlisted:  # reading them fails, so they are reported as skipped with the reason
            found.setdefault(path, (0, 0.0))
    return [WorkUnit(source=path, format=input_format(path), size=size, modified=modified)
            for path, (size, modified) in sorted(found.items())]


def _unlisted_local_entries(pattern: str, listed: set[str]) -> list[str]:
    """Local entries Beam's listing leaves out silently (broken symlinks, unstat-able files, and
    directories a glob matched), so they are reported as skipped instead of lost. Other
    filesystems list what they hold."""
    if "://" in pattern:
        return []
    user_glob = bool(_GLOB_CHARS & set(pattern))
    if not user_glob and os.path.isdir(pattern):
        pattern = os.path.join(pattern, "**", "*")
    entries = glob.glob(pattern, recursive=True)

    def lost(path: str) -> bool:
        if os.path.isdir(path):
            return user_glob
        return os.path.islink(path) and not os.path.exists(path) or not os.path.exists(path)

    return sorted(p for p in (os.path.abspath(e) for e in entries) if p not in listed and lost(p))


@functools.lru_cache(maxsize=4)
def load_hf_dataset(name: str, split: str, revision: str = ""):
    """A `datasets` Dataset: a local `save_to_disk` folder, else a Hub or local loadable dataset at
    `revision` (a Hub commit). Kept per process, keyed by the revision (a local folder's
    fingerprint), so a worker maps it once, not once per unit, and a changed folder is reloaded."""
    import datasets

    if FileSystems.exists(posixpath.join(name, "dataset_dict.json")):
        return datasets.load_from_disk(name)[split]
    if FileSystems.exists(posixpath.join(name, "state.json")):
        return datasets.load_from_disk(name)
    return datasets.load_dataset(name, split=split, revision=_hub_revision(revision) or None)


def hf_revision(name: str, split: str) -> str:
    """What pins the dataset's content: the Hub commit sha of a Hub dataset (resolved now, so every
    worker and a --resume read the same commit), the `datasets` fingerprint of a local folder."""
    for state in (posixpath.join(name, split, "state.json"), posixpath.join(name, "state.json")):
        if FileSystems.exists(state):
            with FileSystems.open(state, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                return f"fingerprint:{json.loads(handle.read())['_fingerprint']}"
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(name).sha or ""
    except Exception as error:  # the hub client raises many types; all mean "cannot resolve"
        raise InputError(f"--hf_dataset {name!r}: cannot resolve its revision on the Hub ({error})") from error


def _hub_revision(revision: str) -> str:
    return "" if revision.startswith("fingerprint:") else revision


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
