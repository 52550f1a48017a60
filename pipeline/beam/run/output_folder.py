"""The output folder policy: an existing non-empty folder is refused, and `--overwrite` deletes only
what a MaskBeam run wrote there (never a folder that is not a MaskBeam output). A folder left by a
run that made no rows (no manifest, its record in the temp folder) is no output: a plain retry
continues it (the same config: finished inputs are reused) or starts it over (another config)."""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Iterable

from apache_beam.io.filesystems import FileSystems

from pipeline.beam.run.folders import delete_folder, has_files
from pipeline.beam.run.resume import ResumeMismatch, run_differences
from pipeline.beam.writing.arrow_io import read_text
from pipeline.kernels.text.cleaning import LARGE_BOILERPLATE_SHARE
from schemas import manifest as m

_log = logging.getLogger("maskbeam.preprocess")
LOGGED_LARGE_BOILERPLATE = 5


def _own_run_record(text: str) -> bool:
    """The run file a MaskBeam run leaves in TEMP_DIR (resume.run_record): a JSON object with its keys."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return (isinstance(record, dict) and isinstance(record.get("config"), dict)
            and isinstance(record.get("tokenizer_sha256"), str) and isinstance(record.get("package_version"), str))


def is_maskbeam_output(output: str) -> bool:
    """True when the folder holds our manifest (its version keys: any MaskBeam version) or the run file of
    an unfinished MaskBeam run. A `manifest.json` of anything else, or a stray `.maskbeam-tmp`, is not
    enough: `--overwrite` deletes only what this says is ours."""
    manifest = posixpath.join(output, m.MANIFEST_FILE)
    if FileSystems.exists(manifest) and m.looks_like_own_manifest(read_text(manifest)):
        return True
    run_file = posixpath.join(output, m.TEMP_DIR, m.RUN_FILE)
    return FileSystems.exists(run_file) and _own_run_record(read_text(run_file))


def made_no_rows(output: str) -> bool:
    """Whether the folder holds a run that ended making no rows (and nothing complete)."""
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    return (FileSystems.exists(posixpath.join(temp_dir, m.NO_ROWS_FILE))
            and FileSystems.exists(posixpath.join(temp_dir, m.RUN_FILE))
            and not FileSystems.exists(posixpath.join(output, m.MANIFEST_FILE)))


def forget_no_rows(output: str) -> None:
    """A run continuing the folder of one that made no rows: the folder no longer holds a failed run."""
    path = posixpath.join(output, m.TEMP_DIR, m.NO_ROWS_FILE)
    if FileSystems.exists(path):
        FileSystems.delete([path])


def prepare_output(output: str, overwrite: bool, record: dict | None = None) -> None:
    """Refuse an existing non-empty output folder (a local folder or an object-store prefix) unless
    --overwrite and it is a MaskBeam output, which is then replaced: only what a run writes there
    is deleted. The folder of a run that made no rows is continued when `record` (this run's) is
    that run's, else replaced."""
    if not has_files(output):
        return
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    ours = is_maskbeam_output(output)
    if not ours:
        raise FileExistsError(f"--output {output!r} exists, is not empty and is not a MaskBeam output (no MaskBeam "
                              f"{m.MANIFEST_FILE} or run file): choose another --output; --overwrite deletes only "
                              "MaskBeam outputs")
    if not overwrite and record is not None and made_no_rows(output):
        try:
            differences = run_differences(output, record)
        except ResumeMismatch as error:
            differences = [str(error)]
        if not differences:
            _log.info("--output %s holds a run of this config that made no rows: continuing it", output)
            return
        _log.info("--output %s holds a run that made no rows, of another config (%s): starting over", output,
                  "; ".join(differences))
        overwrite = True
    if not overwrite:
        if FileSystems.exists(posixpath.join(temp_dir, m.RUN_FILE)):
            raise FileExistsError(f"--output {output!r} holds an unfinished MaskBeam run: rerun the same command with "
                                  "--resume to continue it, or pass --overwrite to start over")
        raise FileExistsError(f"--output {output!r} exists and is not empty (a MaskBeam output); pass --overwrite to "
                              "replace it, or --resume to check it and finish what is missing")
    for folder in (*m.SPLITS, m.TEMP_DIR):
        delete_folder(posixpath.join(output, folder))
    own = (m.MANIFEST_FILE, m.INPUTS_FILE, m.DATASET_DICT_FILE, *m.TOKENIZER_FILES)
    files = [posixpath.join(output, name) for name in own]
    FileSystems.delete([path for path in files if FileSystems.exists(path)])


def warn_large_boilerplate(entries: Iterable[tuple[str, dict]]) -> list[str]:
    """Log every input that lost more than LARGE_BOILERPLATE_SHARE of its text as Gutenberg header
    and licence (INPUTS_FILE records each input's share; `entries`: its (section, entry) records);
    returns the paths of those logged."""
    logged, more = [], 0
    for section, entry in entries:
        if section != m.KEY_INPUTS or entry.get(m.KEY_BOILERPLATE_SHARE, 0.0) <= LARGE_BOILERPLATE_SHARE:
            continue
        if len(logged) == LOGGED_LARGE_BOILERPLATE:
            more += 1
            continue
        logged.append(entry[m.KEY_PATH])
        _log.warning("%s: %.0f%% of its text was cut as Project Gutenberg header/licence (see %s in %s)",
                     entry[m.KEY_PATH], 100 * entry[m.KEY_BOILERPLATE_SHARE], m.KEY_BOILERPLATE_SHARE, m.INPUTS_FILE)
    if more:
        _log.warning("... and %d more inputs (%s in %s)", more, m.KEY_BOILERPLATE_SHARE, m.INPUTS_FILE)
    return logged
