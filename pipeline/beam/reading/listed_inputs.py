"""The inputs a job reads, as every job lists them: the files `--input` names
(`work_units.expand_inputs`), less the job's own `--output` and any MaskBeam output found among them
(a preprocess output, or a train_tokenizer folder): their manifests, shards and tokenizer files are
no training text, and each output left out is said in one line."""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, field

from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.work_units import InputError, WorkUnit, expand_inputs, outside
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


def _output_folders(units: list[WorkUnit]) -> set[str]:
    """The folders among the units' paths that are MaskBeam outputs: a manifest or run file of ours,
    or a train_tokenizer run file, is in them (seen by name first, then read)."""
    candidates = set()
    for unit in units:
        folder, name = posixpath.split(unit.file)
        if name == m.MANIFEST_FILE or name == m.TOKENIZER_RUN_FILE:
            candidates.add(folder)
        elif name == m.RUN_FILE and posixpath.basename(folder) == m.TEMP_DIR:
            candidates.add(posixpath.dirname(folder))
    return {folder for folder in candidates if is_maskbeam_output(folder) or own_tokenizer_folder(folder)}


def _without_outputs(units: list[WorkUnit], left_out: dict[str, int]) -> list[WorkUnit]:
    """`units` less those in a MaskBeam output among them; counts each output's files into `left_out`."""
    for folder in sorted(_output_folders(units), key=len):
        if any(folder.startswith(outer.rstrip("/") + "/") for outer in left_out):
            continue  # inside an output already left out
        kept = outside(units, folder)
        left_out[folder] = len(units) - len(kept)
        units = kept
    return units


def list_inputs(patterns: list[str], output: str) -> ListedInputs:
    """The units of `patterns` (see `work_units.expand_inputs`: deduplicated, sorted by path) outside
    `output` and outside any MaskBeam output among them. Each pattern is judged alone, as the
    workers list them (transforms.ListInputs), so the launcher and the workers find the same units.

    Raises:
        InputError: naming the first pattern that matches no file, or only files of MaskBeam outputs.
    """
    found: dict[str, WorkUnit] = {}
    left_out: dict[str, int] = {}
    for pattern in patterns:
        listed = outside(expand_inputs([pattern]), output)
        outputs: dict[str, int] = {}
        kept = _without_outputs(listed, outputs)
        if listed and not kept:
            raise InputError(f"--input {pattern!r} names only files of MaskBeam outputs ("
                             f"{', '.join(sorted(outputs))}), which are no training text: give the books' folder")
        for folder, files in outputs.items():
            left_out[folder] = max(left_out.get(folder, 0), files)  # two patterns may name the same output
        for unit in kept:
            found.setdefault(unit.source, unit)
    return ListedInputs(units=[found[source] for source in sorted(found)], left_out=left_out)
