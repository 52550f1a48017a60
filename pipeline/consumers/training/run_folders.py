"""The run folder of `jobs.train`: which folders a run may write into, its log file, and what a failed
run leaves behind (its log only, unless a checkpoint worth resuming exists)."""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import shutil
import time

from pipeline.consumers.training.checkpoints import CHECKPOINT_FILE
from pipeline.consumers.training.launcher import LAUNCHER_ENV
from pipeline.consumers.training.metrics import METRICS_FILE
from pipeline.consumers.training.ranks import Ranks
from pipeline.consumers.training.reporting import TENSORBOARD_DIR, WANDB_DIR
from pipeline.consumers.training.saved_model import EXPORT_FOLDER

CONFIG_FILE = "train_config.json"
LOG_FILE = "train.log"

_log = logging.getLogger("maskbeam.train")


class RunFolderError(ValueError):
    """The output folder cannot take this run (a run is there, nothing to resume, not ours)."""


def check_run_folder(output: str, *, resume: bool, overwrite: bool) -> bool:
    """Refuse what would lose or fake a run; with `overwrite`, empty our own run folder; a run that was
    killed before its first checkpoint is started again (with or without `resume`). Returns whether
    the run continues from a checkpoint. Writes nothing otherwise (call on one rank)."""
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other: pick one")
    if os.path.exists(output) and not os.path.isdir(output):
        raise RunFolderError(f"--output {output!r} is a file, not a folder")
    entries = set(os.listdir(output)) if os.path.isdir(output) else set()
    checkpoint = os.path.join(output, CHECKPOINT_FILE)
    if resume and os.path.isfile(checkpoint):
        return True
    if not entries - {LOG_FILE}:  # new, empty, or a failed run's log only
        if resume:
            raise RunFolderError(f"--resume: {output!r} has no {CHECKPOINT_FILE}, there is nothing to resume "
                                 "(drop --resume to start a new run)")
        return False
    if not overwrite and CONFIG_FILE in entries and all(_remains(name) for name in entries):
        _log.warning("%s holds a run that saved no checkpoint (killed before its first one): starting it again "
                     "from step 0", output)
        _empty(output, keep=LOG_FILE)
        return False
    if resume:
        raise RunFolderError(f"--resume: {output!r} has no {CHECKPOINT_FILE}, there is nothing to resume "
                             "(drop --resume to start a new run)")
    if not overwrite:
        what = "a jobs.train run" if CONFIG_FILE in entries else "files"
        raise RunFolderError(f"--output {output!r} already holds {what}: pass --resume to continue it, --overwrite "
                             "to replace it, or choose another folder")
    if CONFIG_FILE not in entries:
        raise RunFolderError(f"--overwrite: {output!r} is not a jobs.train run folder (no {CONFIG_FILE}); "
                             "refusing to delete it")
    _empty(output)
    _log.info("--overwrite: emptied the run folder %s", output)
    return False


def _remains(name: str) -> bool:
    """What a run leaves before its first checkpoint (nothing worth keeping: the run starts again and
    writes its reports and exports again)."""
    return (name in (LOG_FILE, CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE + ".partial", TENSORBOARD_DIR, WANDB_DIR)
            or name.startswith("samples-rank") and name.endswith(".jsonl")
            or EXPORT_FOLDER.fullmatch(name.removesuffix(".partial")) is not None)


def _empty(output: str, keep: str | None = None) -> None:
    for name in os.listdir(output):
        if name == keep:
            continue
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def check_shared_output(output: str, ranks: Ranks, wait_s: float = 30.0) -> None:
    """Every rank must see the run folder rank 0 writes (its checkpoint is loaded by every rank, and
    each rank writes its own samples log there): across machines, --output must be on a filesystem
    they share. Rank 0 writes a marker; a rank that does not see it within `wait_s` (a network
    filesystem's caches) fails the run on every rank, naming the ranks."""
    token = ranks.broadcast(secrets.token_hex(8) if ranks.is_main else None)
    marker = os.path.join(output, f".shared-check-{token}")
    if ranks.is_main:
        with open(marker, "w") as handle:
            handle.write(token)
    ranks.barrier()
    deadline = time.monotonic() + wait_s
    while not _holds(marker, token) and time.monotonic() < deadline:
        time.sleep(0.5)
    blind = [0.0] * ranks.world_size
    blind[ranks.rank] = 0.0 if _holds(marker, token) else 1.0
    blind = [rank for rank, flag in enumerate(ranks.sum(blind)) if flag]
    if ranks.is_main:
        os.remove(marker)
    if blind:
        raise RunFolderError(f"--output {output!r} is not shared by every rank: rank{'s' if len(blind) > 1 else ''} "
                             f"{', '.join(map(str, blind))} cannot see what rank 0 writes there; across machines, "
                             "put --output on a filesystem they all mount (NFS, Lustre, ...)")


def _holds(path: str, token: str) -> bool:
    try:
        with open(path) as handle:
            return handle.read() == token
    except OSError:
        return False


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
    _empty(output, keep=LOG_FILE)


def resume_command(argv: list[str], world_size: int) -> str:
    """The command that continues this run: the same flags, --resume instead of --overwrite."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")] + ["--resume"]
    if os.environ.get(LAUNCHER_ENV):  # started by `python -m jobs.train --nproc_per_node N`
        return shlex.join(["python", "-m", "jobs.train", "--nproc_per_node", str(world_size), *args])
    launcher = (["torchrun", "--nproc_per_node", str(world_size)] if world_size > 1 else ["python"])
    return shlex.join([*launcher, "-m", "jobs.train", *args])
