"""The batches `jobs.train` trains and evaluates on: the loader's compact MLM batches plus what the
step needs to know about them, computed in the DataLoader worker (on the CPU, where the labels are
made) instead of from device tensors in the training process: the flat positions of the targets
(`TARGETS_AT`, which the gathered head selects) and the count of real tokens (`TOKENS`)."""

from __future__ import annotations

import numpy as np
import torch

from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, LABELS

TARGETS_AT = "targets_at"  # int64 flat (row-major) positions where labels != -100
TOKENS = "tokens"  # a Python int: the batch's attention-mask sum (real tokens)


class StepCollator:
    """`collate(batch)` (an `MlmCollator`) with `TARGETS_AT` and `TOKENS` added."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, batch) -> dict:
        out = self.collate(batch)
        labels = out[LABELS].numpy()
        out[TARGETS_AT] = torch.from_numpy(np.flatnonzero(labels.reshape(-1) != IGNORE_INDEX).astype(np.int64))
        out[TOKENS] = int(out[ATTENTION_MASK].numpy().sum(dtype=np.int64))
        return out


def targets_of(batch: dict) -> int:
    """The batch's number of targets (known on the CPU: no device sync)."""
    return int(batch[TARGETS_AT].numel())


def to_device(batch: dict, device: torch.device) -> dict:
    """The batch's tensors on `device` (integer ones widened to int64 there), without `TOKENS`."""
    return {k: (v.to(device, non_blocking=True) if k == TARGETS_AT else v.to(device, non_blocking=True).long())
            for k, v in batch.items() if k != TOKENS}
