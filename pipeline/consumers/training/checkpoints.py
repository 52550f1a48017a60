"""Training checkpoints of `jobs.train`: written atomically, read as data only.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts (model, optimizer, scheduler,
sampler and RNG state, the step, the config). It is loaded with `torch.load(weights_only=True)`,
PyTorch's restricted unpickler, which rebuilds tensors and plain containers and refuses every other
global: a `checkpoint.pt` from elsewhere (a colleague's run folder, a download) cannot run code
when `--resume` reads it. No extra safe globals are needed, because the saved state is made of
plain types only (`plain` converts numpy scalars before saving).
"""

from __future__ import annotations

import os
import pickle
import re
import shutil

import numpy as np
import torch

CHECKPOINT_FILE = "checkpoint.pt"
_OLDER = re.compile(r"checkpoint-(\d+)\.pt")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: unreadable, or holding more than tensors and plain data."""


def plain(value):
    """`value` with numpy scalars and arrays turned into Python numbers and lists, recursively."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def save_checkpoint(path: str, state: dict, *, keep: int = 1, previous_step: int | None = None) -> None:
    """Atomic: a killed save never leaves a half-written checkpoint under the final name, and there is
    always a `path` once there was one. With `keep` > 1 the checkpoint `path` held (of step
    `previous_step`) stays as `checkpoint-STEP.pt` beside it (a hard link, no copy), and only the
    newest `keep` - 1 of those are kept."""
    temp = path + ".partial"
    torch.save(plain(state), temp)
    if keep > 1 and previous_step is not None and os.path.isfile(path):
        older = older_checkpoint(path, previous_step)
        if not os.path.exists(older):
            try:
                os.link(path, older)
            except OSError:  # a filesystem without hard links
                shutil.copyfile(path, older)
    os.replace(temp, path)
    folder = os.path.dirname(path) or "."
    older = sorted((int(m.group(1)), name) for name in os.listdir(folder) if (m := _OLDER.fullmatch(name)))
    for _, name in older[: max(0, len(older) - (keep - 1))]:
        os.remove(os.path.join(folder, name))


def older_checkpoint(path: str, step: int) -> str:
    """Where `save_checkpoint` keeps the checkpoint of `step` once a newer one took `path`."""
    return os.path.join(os.path.dirname(path), f"checkpoint-{step}.pt")


def load_checkpoint(path: str) -> dict:
    """The state saved by `save_checkpoint`, read with the restricted unpickler (tensors and plain
    data only).

    Raises:
        CheckpointError: when the file holds anything else (a pickled callable, a class) or is not a
            checkpoint at all; nothing in it has run.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path} holds more than tensors and plain data, refusing to load it "
                              f"(a checkpoint is read as data only): {first}") from None
    except (RuntimeError, EOFError) as error:
        raise CheckpointError(f"{path} is not a readable checkpoint: {error}") from None
    if not isinstance(state, dict) or not {"model", "optimizer", "step"} <= state.keys():
        raise CheckpointError(f"{path} is not a jobs.train checkpoint (expected a dict with model, optimizer, step)")
    return state


def rng_state() -> dict:
    """The CPU generator and the current CUDA device's (never every device's: touching each GPU from
    every rank would open a context on each)."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if isinstance(state.get("cuda"), torch.Tensor) and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
