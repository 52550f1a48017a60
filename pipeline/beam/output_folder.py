"""The output folder policy: an existing non-empty folder is refused, and `--overwrite` deletes only
what a MaskBeam run wrote there (never a folder that is not a MaskBeam output)."""

from __future__ import annotations

import json
import logging
import posixpath

from apache_beam.io.filesystems import FileSystems

from pipeline.beam.arrow_io import read_text
from pipeline.beam.folders import delete_folder, has_files
from pipeline.kernels.cleaning import LARGE_BOILERPLATE_SHARE
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


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuse an existing non-empty output folder (a local folder or an object-store prefix) unless
    --overwrite and it is a MaskBeam output, which is then replaced: only what a run writes there
    is deleted."""
    if not has_files(output):
        return
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    ours = is_maskbeam_output(output)
    if not ours:
        raise FileExistsError(f"--output {output!r} exists, is not empty and is not a MaskBeam output (no MaskBeam "
                              f"{m.MANIFEST_FILE} or run file): choose another --output; --overwrite deletes only "
                              "MaskBeam outputs")
    if not overwrite:
        if FileSystems.exists(posixpath.join(temp_dir, m.RUN_FILE)):
            raise FileExistsError(f"--output {output!r} holds an unfinished MaskBeam run: rerun the same command with "
                                  "--resume to continue it, or pass --overwrite to start over")
        raise FileExistsError(f"--output {output!r} exists and is not empty (a MaskBeam output); pass --overwrite to "
                              "replace it, or --resume to check it and finish what is missing")
    for folder in (*m.SPLITS, m.TEMP_DIR):
        delete_folder(posixpath.join(output, folder))
    files = [posixpath.join(output, name) for name in (m.MANIFEST_FILE, m.DATASET_DICT_FILE, *m.TOKENIZER_FILES)]
    FileSystems.delete([path for path in files if FileSystems.exists(path)])


def warn_large_boilerplate(output: str) -> list[str]:
    """Log every input that lost more than LARGE_BOILERPLATE_SHARE of its text as Gutenberg header
    and licence (the manifest records each input's share); returns their paths."""
    manifest = json.loads(read_text(posixpath.join(output, m.MANIFEST_FILE)))
    large = [entry for entry in manifest[m.KEY_INPUTS]
             if entry.get(m.KEY_BOILERPLATE_SHARE, 0.0) > LARGE_BOILERPLATE_SHARE]
    for entry in large[:LOGGED_LARGE_BOILERPLATE]:
        _log.warning("%s: %.0f%% of its text was cut as Project Gutenberg header/licence (see %s in the manifest)",
                     entry[m.KEY_PATH], 100 * entry[m.KEY_BOILERPLATE_SHARE], m.KEY_BOILERPLATE_SHARE)
    if len(large) > LOGGED_LARGE_BOILERPLATE:
        _log.warning("... and %d more inputs (%s in the manifest)", len(large) - LOGGED_LARGE_BOILERPLATE,
                     m.KEY_BOILERPLATE_SHARE)
    return [entry[m.KEY_PATH] for entry in large]
