"""The inputs a job reads, as every job lists them: the files `--input` names
(`work_units.pattern_units`), less the job's own `--output` and any MaskBeam output found among them
(a preprocess output, or a train_tokenizer folder): their manifests, shards and tokenizer files are
no training text, and each output left out is said in one line."""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field

from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.work_units import InputError, WorkUnit, merged_units, pattern_units
from pipeline.beam.run.output_folder import is_maskbeam_output
from pipeline.beam.writing.arrow_io import read_text
from pipeline.console.formatting import plural, printable
from schemas import manifest as m


@dataclass(frozen=True)
class ListedInputs:
    """The units to read, and each MaskBeam output left out of them with its number of files."""

    units: list[WorkUnit]
    left_out: dict[str, int] = field(default_factory=dict)

    def log(self, logger: logging.Logger) -> None:
        for folder, files in sorted(self.left_out.items()):
            logger.info("--input: left out %s of the MaskBeam output %s (not training text)", plural(files, "file"),
                        printable(folder, keep_newlines=False))


def own_tokenizer_folder(folder: str) -> bool:
    """Whether `folder` holds a train_tokenizer output (its run file, see pipeline.tokenizer.trained_output)."""
    path = posixpath.join(folder, m.TOKENIZER_RUN_FILE)
    if not FileSystems.exists(path):
        return False
    try:
        return m.looks_like_tokenizer_run(read_text(path))
    except (OSError, UnicodeDecodeError):
        return False


def _output_candidate(path: str) -> str | None:
    """The folder `path` would make a MaskBeam output, seen by its name: a manifest or run file of
    ours, or a train_tokenizer run file (then read to be sure: `_output_folders`)."""
    folder, name = posixpath.split(path)
    if name == m.MANIFEST_FILE or name == m.TOKENIZER_RUN_FILE:
        return folder
    if name == m.RUN_FILE and posixpath.basename(folder) == m.TEMP_DIR:
        return posixpath.dirname(folder)
    return None


def _output_folders(candidates: set[str]) -> set[str]:
    """The candidate folders that are MaskBeam outputs."""
    return {folder for folder in candidates if is_maskbeam_output(folder) or own_tokenizer_folder(folder)}


def _resolved(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _prefix(folder: str) -> str:
    return _resolved(folder).rstrip("/") + "/"


class InputListing:
    """The units of `patterns` (each `work_units.pattern_units`: merged, a path two name once, in
    path order) outside `output` and outside any MaskBeam output among them, listed as they are
    read: iterating lists the files again, and no listing is ever held whole (a million units were
    ~600 MB of the launcher and as much of the lister). Each pattern is judged alone, as the
    workers list them (transforms.ListInputs), so the launcher and the workers find the same units.

    Made, it has listed each pattern once by name (the outputs among its files, and how many files
    each holds: `left_out`, which `log` says). A pattern of an object store is listed once and
    kept (Beam's match gives a list; listing a bucket again costs a request a thousand objects).

    Raises:
        InputError: naming the first pattern that matches no file, or only files of MaskBeam outputs.
    """

    def __init__(self, patterns: list[str], output: str) -> None:
        self._output = output
        self.left_out: dict[str, int] = {}
        self.files = 0  # listed files, kept ones, of every pattern (a file two name counts twice)
        self._excluded: list[tuple[str, tuple[str, ...]]] = []  # (pattern, folder prefixes left out)
        self._kept: dict[str, list[WorkUnit]] = {}  # the units of each object-store pattern
        for pattern in patterns:
            by_folder: dict[str, int] = {}
            candidates = set()
            own = _prefix(output)
            units = pattern_units(pattern)
            if "://" in pattern:
                units = self._kept[pattern] = list(units)
            for unit in units:
                folder = posixpath.dirname(unit.source)
                by_folder[folder] = by_folder.get(folder, 0) + 1
                candidate = _output_candidate(unit.source)
                if candidate is not None:
                    candidates.add(candidate)
            listed = {f: k for f, k in by_folder.items() if not (_resolved(f) + "/").startswith(own)}
            outside_own = bool(listed)
            prefixes, outputs = [own], []
            for folder in sorted(_output_folders(candidates), key=len):
                prefix = _prefix(folder)
                if any(prefix.startswith(outer) for outer in prefixes[1:]):
                    continue  # inside an output already left out
                inside = [f for f in listed if (_resolved(f) + "/").startswith(prefix)]
                if inside:
                    files = sum(listed.pop(f) for f in inside)
                    self.left_out[folder] = max(self.left_out.get(folder, 0), files)  # two patterns may name it
                    outputs.append(folder)
                prefixes.append(prefix)
            if outside_own and not listed:
                raise InputError(f"--input {pattern!r} names only files of MaskBeam outputs ("
                                 f"{', '.join(sorted(outputs))}), which are no training text: give the books' folder")
            self.files += sum(listed.values())
            self._excluded.append((pattern, tuple(prefixes)))

    def __iter__(self) -> Iterator[WorkUnit]:
        def kept(pattern: str, prefixes: tuple[str, ...]) -> Iterator[WorkUnit]:
            for unit in self._kept.get(pattern) or pattern_units(pattern):
                path = _resolved(unit.path or unit.source)
                if not any(path.startswith(prefix) for prefix in prefixes):
                    yield unit

        return merged_units([kept(pattern, prefixes) for pattern, prefixes in self._excluded])

    def log(self, logger: logging.Logger) -> None:
        for folder, files in sorted(self.left_out.items()):
            logger.info("--input: left out %s of the MaskBeam output %s (not training text)", plural(files, "file"),
                        printable(folder, keep_newlines=False))


def list_inputs(patterns: list[str], output: str) -> ListedInputs:
    """`InputListing(patterns, output)` as a list (`ListedInputs`)."""
    listing = InputListing(patterns, output)
    return ListedInputs(units=list(listing), left_out=listing.left_out)
