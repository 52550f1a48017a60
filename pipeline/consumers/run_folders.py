"""The run folder of `jobs.train`: which folders a run may write into, its log file, and what a failed
run leaves behind (its log only, unless a checkpoint worth resuming exists)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil

from pipeline.consumers.checkpoints import CHECKPOINT_FILE
from pipeline.consumers.rank_launcher import LAUNCHER_ENV
from pipeline.consumers.training import CONFIG_FILE, LOG_FILE

_log = logging.getLogger("maskbeam.train")


class RunFolderError(ValueError):
    """The output folder cannot take this run (a run is there, nothing to resume, not ours)."""


def check_run_folder(output: str, *, resume: bool, overwrite: bool) -> None:
    """Refuse what would lose or fake a run; with `overwrite`, empty our own run folder. Writes nothing
    otherwise (call on one rank)."""
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other: pick one")
    if os.path.exists(output) and not os.path.isdir(output):
        raise RunFolderError(f"--output {output!r} is a file, not a folder")
    entries = set(os.listdir(output)) if os.path.isdir(output) else set()
    checkpoint = os.path.join(output, CHECKPOINT_FILE)
    if resume:
        if not os.path.isfile(checkpoint):
            raise RunFolderError(f"--resume: {output!r} has no {CHECKPOINT_FILE}, there is nothing to resume "
                                 "(drop --resume to start a new run)")
        return
    if not entries - {LOG_FILE}:  # new, empty, or a failed run's log only
        return
    if not overwrite:
        what = "a jobs.train run" if CONFIG_FILE in entries else "files"
        raise RunFolderError(f"--output {output!r} already holds {what}: pass --resume to continue it, --overwrite "
                             "to replace it, or choose another folder")
    if CONFIG_FILE not in entries:
        raise RunFolderError(f"--overwrite: {output!r} is not a jobs.train run folder (no {CONFIG_FILE}); "
                             "refusing to delete it")
    for name in entries:
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    _log.info("--overwrite: emptied the run folder %s", output)


def attach_log_file(output: str) -> logging.Handler:
    """Every log line of the run also goes to OUTPUT/train.log (appended to on resume)."""
    handler = logging.FileHandler(os.path.join(output, LOG_FILE))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("maskbeam").addHandler(handler)
    if logging.getLogger("maskbeam").getEffectiveLevel() > logging.INFO:
        logging.getLogger("maskbeam").setLevel(logging.INFO)
    return handler


def clean_failed_run(output: str, error: BaseException) -> None:
    """A run that failed before its first checkpoint leaves only its log (with the error); with a
    checkpoint, everything stays and the log says how to resume."""
    if os.path.isfile(os.path.join(output, CHECKPOINT_FILE)):
        _log.error("the run failed (%s); its checkpoint is kept: --resume continues from it", error)
        return
    _log.error("the run failed before its first checkpoint (%s): only this log is kept", error)
    for name in os.listdir(output):
        if name == LOG_FILE:
            continue
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def resume_command(argv: list[str], world_size: int) -> str:
    """The command that continues this run: the same flags, --resume instead of --overwrite."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")] + ["--resume"]
    if os.environ.get(LAUNCHER_ENV):  # started by `python -m jobs.train --nproc_per_node N`
        return shlex.join(["python", "-m", "jobs.train", "--nproc_per_node", str(world_size), *args])
    launcher = (["torchrun", "--nproc_per_node", str(world_size)] if world_size > 1 else ["python"])
    return shlex.join([*launcher, "-m", "jobs.train", *args])
