"""The output folder policy of jobs.train_tokenizer, as preprocess's: a non-empty folder is refused, and
`--overwrite` replaces only an earlier output of this job, known by its run file (TOKENIZER_RUN_FILE),
deleting only the files that file names (never a folder the job did not write, such as a downloaded
tokenizer or a preprocess output).

The run file is written before the tokenizer files, naming them, and again after with what was read
and skipped: a run stopped half-way leaves a folder that `--overwrite` still replaces."""

from __future__ import annotations

import json
import os

from pipeline import __version__
from schemas import manifest as m

RUN_FORMAT = 1


def _record(folder: str) -> dict | None:
    path = os.path.join(folder, m.TOKENIZER_RUN_FILE)
    if not os.path.isfile(path) or os.path.islink(path):
        return None
    with open(path, "rb") as handle:
        text = handle.read(m.MAX_MANIFEST_BYTES + 1)
    return json.loads(text) if m.looks_like_tokenizer_run(text) else None


def check_tokenizer_output(output: str, overwrite: bool) -> list[str]:
    """Refuse `output` unless it is absent, empty, or (with `overwrite`) an earlier output of this job.

    Returns:
        The files of the earlier output to delete before writing (none for a new or empty folder).

    Raises:
        FileExistsError: naming the folder and what to do.
    """
    if "://" in output:
        raise FileExistsError(f"--output {output!r}: the tokenizer is written to a local folder (copy it to "
                              "the object store afterwards)")
    if not os.path.lexists(output):
        return []
    if not os.path.isdir(output):
        raise FileExistsError(f"--output {output!r} exists and is not a folder: choose another --output")
    if not os.listdir(output):
        return []
    record = _record(output)
    if record is None:
        raise FileExistsError(f"--output {output!r} exists, is not empty and is not a train_tokenizer output (no "
                              f"MaskBeam {m.TOKENIZER_RUN_FILE}): choose another --output; --overwrite replaces only "
                              "an earlier train_tokenizer output")
    if not overwrite:
        raise FileExistsError(f"--output {output!r} exists and is not empty (an earlier train_tokenizer output); "
                              "pass --overwrite to replace it, or choose another --output")
    return [*record[m.KEY_FILES], m.TOKENIZER_RUN_FILE]


def replace_tokenizer_output(output: str, earlier: list[str], files: list[str]) -> None:
    """Delete the `earlier` output's files (check_tokenizer_output), then write the run file naming
    the `files` about to be written, so that a run stopped before its end is still ours."""
    for name in earlier:
        path = os.path.join(output, name)
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
    write_tokenizer_run(output, {m.KEY_FILES: files})


def write_tokenizer_run(output: str, record: dict) -> None:
    """Write the run file: `record` (its KEY_FILES included) with the format and package versions."""
    os.makedirs(output, exist_ok=True)
    full = {m.KEY_TOKENIZER_RUN: RUN_FORMAT, m.KEY_PACKAGE_VERSION: __version__, **record}
    with open(os.path.join(output, m.TOKENIZER_RUN_FILE), "w", encoding="utf-8") as handle:
        json.dump(full, handle, indent=2, sort_keys=True)
        handle.write("\n")
