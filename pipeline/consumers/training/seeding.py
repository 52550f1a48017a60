"""Every seed of `jobs.train` in one place: the initial weights, each rank's dropout stream, and
that stream on resume.

The weights are drawn from `seed` on every rank (DDP broadcasts rank 0's anyway); dropout differs by
rank (`seed + rank`). A resume on the same number of ranks restores each rank's saved stream, so the
loss curve is the one an uninterrupted run draws; on another number, rank 0 takes the saved rank 0
stream and the others a seed of the step and their rank (other ranks draw other masks anyway).
"""

from __future__ import annotations

import torch

from pipeline.consumers.training.checkpoints import set_rng_state


def seed_weights(seed: int) -> None:
    torch.manual_seed(seed)


def seed_dropout(seed: int, rank: int, checkpoint: dict | None = None, world_size: int = 1) -> None:
    """Each rank's dropout stream: fresh, or from `checkpoint` (see the module's docstring)."""
    if checkpoint is None:
        torch.manual_seed(seed + rank)
        return
    saved = checkpoint.get("rng_ranks") or [checkpoint["rng"]]
    if len(saved) == world_size:
        set_rng_state(saved[rank])
        return
    set_rng_state(checkpoint["rng"])
    if rank:
        torch.manual_seed(seed + 1000003 * checkpoint["step"] + rank)
