"""The evaluation of `jobs.train`: MLM loss and top-1 accuracy over a fixed sample's targets."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from pipeline.consumers.training.batches import TARGETS_AT, to_device
from pipeline.consumers.training.loss import target_logits
from pipeline.consumers.training.precision import autocast as device_autocast
from schemas.shard import ATTENTION_MASK, INPUT_IDS, LABELS


@torch.no_grad()
def evaluate(model, batches, device: torch.device, reduce: Callable[[list[float]], list[float]] = lambda x: x,
             should_stop: Callable[[], bool] = lambda: False, autocast=None) -> dict | None:
    """MLM loss and top-1 accuracy over the target positions of `batches` (this rank's share);
    `reduce` sums the totals over the ranks. {} when there was no target (nothing measured); None when
    `should_stop` turned true on any rank (a stop request: the evaluation is abandoned at once, each
    rank after its current batch). The sums stay on the device until the end (one sync).
    `autocast`: the run's autocast context factory (default: `--precision auto`'s on the device)."""
    enter = autocast or (lambda: device_autocast(device))
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, correct
    targets, stopped = 0, False
    for batch in batches:
        if should_stop():
            stopped = True
            break
        targets += int(batch[TARGETS_AT].numel()) if TARGETS_AT in batch else 0
        batch = to_device(batch, device)
        with enter():
            logits, labels = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS],
                                           batch.get(TARGETS_AT))
        if TARGETS_AT not in batch:
            targets += int(labels.numel())
        totals[0] += F.cross_entropy(logits.float(), labels, reduction="sum").double()
        totals[1] += (logits.argmax(-1) == labels).sum()
    model.train()
    loss_sum, correct = totals.tolist()
    loss_sum, correct, targets, stopped = reduce([loss_sum, correct, float(targets), float(stopped)])
    if stopped:
        return None
    if not targets:
        return {}
    return {"eval_loss": loss_sum / targets, "eval_accuracy": correct / targets, "eval_targets": int(targets)}
