"""--resume: check that an interrupted (or finished) run in the output folder used the same config,
and seed the temp folder so finished units and shards are reused."""

from __future__ import annotations

import json
import posixpath

from apache_beam.io.filesystems import FileSystems

from pipeline import __version__
from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.run.config import NOT_IN_THE_BYTES, PreprocessConfig
from pipeline.beam.run.progress import input_name, temp_names
from pipeline.beam.unit_results import load_group_results, load_result, result_path
from pipeline.beam.writing.arrow_io import file_sha256, read_text, write_text
from pipeline.beam.writing.inputs_file import read_entries
from pipeline.console.formatting import plural
from schemas import manifest as m

_NOT_COMPARED = NOT_IN_THE_BYTES  # a run started with one tokenizer backend may resume with the other


class ResumeMismatch(ValueError):
    """The output folder holds a run of another config; the message says what differs."""


def run_record(config: PreprocessConfig, tokenizer_sha256: str) -> dict:
    """What decides the output's bytes: compared on --resume."""
    record = {k: v for k, v in config.to_record().items() if k not in _NOT_COMPARED}
    return {"config": record, "tokenizer_sha256": tokenizer_sha256, "package_version": __version__}


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted(set(old["config"]) | set(new["config"]))
    diffs = [f"--{k}: was {old['config'].get(k)!r}, now {new['config'].get(k)!r}"
             for k in keys if old["config"].get(k) != new["config"].get(k)]
    for key in ("tokenizer_sha256", "package_version"):
        if old.get(key) != new.get(key):
            diffs.append(f"{key}: was {old.get(key)!r}, now {new.get(key)!r}")
    return diffs


def run_differences(output: str, record: dict) -> list[str]:
    """How the unfinished run in `output` differs from `record` (empty: the same run).

    Raises:
        ResumeMismatch: its run file is not a MaskBeam run file.
    """
    return _differences(_read_run_record(posixpath.join(output, m.TEMP_DIR, m.RUN_FILE)), record)


def start_run(output: str, record: dict) -> None:
    """Record the config of a fresh run in its temp folder."""
    write_text(posixpath.join(output, m.TEMP_DIR, m.RUN_FILE), json.dumps(record, sort_keys=True))


def prepare_resume(output: str, record: dict, units: list[WorkUnit] | None = None) -> str:
    """Check the earlier run's config and return "complete" (all shards check out), or "resume".

    Raises:
        ResumeMismatch: no earlier run, one with another config (the message lists the differences),
            or a finished output whose inputs changed since (new, changed or gone inputs listed).
    """
    run_file = posixpath.join(output, m.TEMP_DIR, m.RUN_FILE)
    manifest_file = posixpath.join(output, m.MANIFEST_FILE)
    if FileSystems.exists(run_file):
        old = _read_run_record(run_file)
    elif FileSystems.exists(manifest_file):
        manifest = _read_manifest(manifest_file)
        old = {"config": {k: v for k, v in manifest[m.KEY_CONFIG].items() if k not in _NOT_COMPARED},
               "tokenizer_sha256": manifest[m.KEY_TOKENIZER][m.KEY_SHA256],
               "package_version": manifest[m.KEY_PACKAGE_VERSION]}
    else:
        raise ResumeMismatch(f"--resume: {output!r} holds no earlier run to resume")
    diffs = _differences(old, record)
    if diffs:
        raise ResumeMismatch("--resume: the earlier run in the output folder used another config: " + "; ".join(diffs))
    if FileSystems.exists(manifest_file) and not FileSystems.exists(run_file):
        manifest = _read_manifest(manifest_file)
        if units is not None:
            _check_inputs_unchanged(output, manifest, units)
        return _complete_or_seed(output, manifest, record)
    return "resume"


def _read_manifest(path: str) -> dict:
    """The output's manifest, validated like every consumer's (the folder may come from anyone):
    its shard names, above all, become paths and record names here."""
    try:
        return m.parse_manifest(read_text(path))
    except m.ManifestError as error:
        raise ResumeMismatch(f"--resume: {path}: {error}; not an output this version can resume "
                             "(--overwrite replaces a MaskBeam output)") from None


def _read_run_record(path: str) -> dict:
    try:
        record = json.loads(read_text(path))
    except (ValueError, RecursionError) as error:
        raise ResumeMismatch(f"--resume: {path} is not a MaskBeam run file ({type(error).__name__})") from None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise ResumeMismatch(f"--resume: {path} is not a MaskBeam run file (no config object)")
    return record


def _check_inputs_unchanged(output: str, manifest: dict, units: list[WorkUnit]) -> None:
    """A finished output must not be reported complete for inputs that appeared, changed size or
    went away since it was made (the inputs and skipped records of its INPUTS_FILE, checked)."""
    try:
        before = {e[m.KEY_PATH]: e.get(m.KEY_SIZE) for section, e in read_entries(output, manifest)
                  if section in (m.KEY_INPUTS, m.KEY_SKIPPED)}
    except m.InputsFileError as error:
        raise ResumeMismatch(f"--resume: {posixpath.join(output, m.INPUTS_FILE)}: {error}; rerun with --overwrite "
                             "to rebuild the output") from None
    now = {u.source: u.size for u in units}
    new = sorted(set(now) - set(before))
    gone = sorted(set(before) - set(now))
    changed = sorted(p for p in set(now) & set(before) if before[p] is not None and before[p] != now[p])
    if new or gone or changed:
        parts = [f"{label} ({len(paths)}): {', '.join(paths[:5])}{' ...' if len(paths) > 5 else ''}"
                 for label, paths in (("new", new), ("changed", changed), ("gone", gone)) if paths]
        raise ResumeMismatch(f"--resume: {output!r} is complete, but its inputs changed since it was made: "
                             f"{'; '.join(parts)}. Rerun with --overwrite to rebuild it from the current inputs")


def _complete_or_seed(output: str, manifest: dict, record: dict) -> str:
    """A finished output: "complete" when every shard checks out; else seed shard records so the
    good shards are kept, and resume (the deleted parts are recomputed)."""
    good, entries = True, []
    for split, info in manifest[m.KEY_SPLITS].items():
        for index, entry in enumerate(info[m.KEY_SHARDS]):
            path = posixpath.join(output, split, entry[m.KEY_FILENAME])
            ok = FileSystems.exists(path) and file_sha256(path) == entry[m.KEY_SHA256]
            good &= ok
            if ok:
                entries.append((split, index, entry))
    if good:
        return "complete"
    start_run(output, record)
    for split, index, entry in entries:
        result = {"split": split, "index": index, "filename": entry[m.KEY_FILENAME], "rows": entry[m.KEY_ROWS],
                  "bytes": entry[m.KEY_BYTES], "sha256": entry[m.KEY_SHA256], "mask_counts": entry[m.KEY_MASK_COUNTS],
                  "plan": entry[m.KEY_PLAN]}
        write_text(posixpath.join(output, m.TEMP_DIR, m.shard_record_name(split, entry[m.KEY_FILENAME])),
                   json.dumps(result, sort_keys=True))
    FileSystems.delete([posixpath.join(output, m.MANIFEST_FILE)])
    return "resume"


def reuse_line(output: str, units: list[WorkUnit]) -> str:
    """What a resumed run takes over from the earlier one, in one line: the inputs whose every unit
    left a result (unchanged since, its parts in place), the inputs to redo, and the finished shards
    (each kept where its plan and checksum still match when its turn comes)."""
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    names = temp_names(temp_dir)
    own = set(names)  # a unit's own record is looked at only where the listing has it (no existence check an input)
    inputs: dict[str, bool] = {}
    grouped = load_group_results(temp_dir, units)  # the group record files' headers, read once
    for unit in units:
        name = input_name(unit)
        inputs[name] = inputs.get(name, True) and (
            grouped[unit.source] is not None
            or (posixpath.basename(result_path(temp_dir, unit.source)) in own
                and load_result(temp_dir, unit) is not None))
    reused = sum(inputs.values())
    shards = 0
    for split in m.SPLITS:
        head, tail = m.shard_record_name(split, "\0").split("\0")
        filenames = [name[len(head):-len(tail)] for name in names
                     if name.startswith(head) and name.endswith(tail) and len(name) > len(head + tail)]
        shards += sum(FileSystems.exists(posixpath.join(output, split, filename)) for filename in filenames)
    return (f"--resume: {reused} of {plural(len(inputs), 'input')} reused from the earlier run, {len(inputs) - reused} "
            f"to redo; {plural(shards, 'finished shard')} found, each kept if its plan and checksum still match")
