"""The learning-rate schedule of `jobs.train`: linear warmup, then linear, cosine, constant or WSD."""

from __future__ import annotations

import logging
import math

import torch

from pipeline.consumers.training.config import TrainConfig

_log = logging.getLogger("maskbeam.train")


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warmup to cfg.lr, then: linear or cosine decay to the floor at total_steps; constant; or
    WSD (warmup-stable-decay: constant, then linear to the floor over the last `cfg.decay_fraction` of
    the run, which lets a run be continued from its stable phase). The floor is `cfg.min_lr_ratio`
    times cfg.lr (0 by default; HF's cosine_with_min_lr for cosine)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    floor = cfg.min_lr_ratio
    if cfg.schedule == "wsd":
        decay = max(1, round(cfg.decay_fraction * total_steps))
        start = max(cfg.warmup_steps, total_steps - decay)
        left = 1 - min(1.0, max(0, step - start) / max(1, total_steps - start))
        return cfg.lr * (floor + (1 - floor) * left)
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    if cfg.schedule == "cosine":
        return cfg.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
    return cfg.lr * (floor + (1 - floor) * (1 - progress))


def warmup_clipped(cfg: TrainConfig, total: int) -> None:
    """A warmup longer than the run never reaches the peak rate: clip it to a tenth of the run, saying so."""
    if cfg.warmup_steps > total:
        clipped = max(1, total // 10)
        _log.warning("--warmup_steps %d is longer than the run's %d steps: warming up over %d steps instead",
                     cfg.warmup_steps, total, clipped)
        cfg.warmup_steps = clipped


def lr_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total: int):
    """The schedule as a LambdaLR over `total` steps (its construction sets the rate of step 0)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg, total) / cfg.lr)
