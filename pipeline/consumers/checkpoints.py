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

import numpy as np
import torch

CHECKPOINT_FILE = "checkpoint.pt"


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


def save_checkpoint(path: str, state: dict) -> None:
    """Atomic: a killed save never leaves a half-written checkpoint under the final name."""
    temp = path + ".partial"
    torch.save(plain(state), temp)
    os.replace(temp, path)


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
