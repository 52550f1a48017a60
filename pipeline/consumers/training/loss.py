"""The MLM loss of `jobs.train` with the gathered head: the vocabulary projection only at the targets.

The target positions come with each batch (`batches.TARGETS_AT`, found on the CPU where the labels
are made), so selecting them on the device is an `index_select` of known size: a boolean mask
(`hidden[labels != -100]`) would make the GPU report its count back to the CPU every micro-batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.consumers.training.batches import TARGETS_AT
from pipeline.consumers.training.models import encoder_and_head
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS


def target_positions(labels: torch.Tensor) -> torch.Tensor:
    """The flat (row-major) positions of a batch's targets (labels != -100), as int64."""
    return torch.nonzero(labels.reshape(-1) != IGNORE_INDEX).flatten()


def target_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                  positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the target positions only, and their labels: the encoder runs on every position,
    the vocabulary projection (the MLM head) only where labels != -100, as NVIDIA's and Megatron's
    BERT do (and ModernBERT's `sparse_prediction`). About 85% of the head's FLOPs and activation
    memory are otherwise spent on positions the loss ignores; for small models the head is most of
    the step. Families without a known head (`models.encoder_and_head`) run the full head.
    `positions`: the flat target positions on the labels' device (found here when not given).
    """
    if positions is None:
        positions = target_positions(labels)
    targets = labels.reshape(-1).index_select(0, positions)
    parts = encoder_and_head(model)
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.flatten(0, 1).index_select(0, positions), targets
    encoder, head = parts
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return head(hidden.flatten(0, 1).index_select(0, positions)), targets


def mlm_loss_sum(model, batch: dict) -> tuple[torch.Tensor, int]:
    """The summed cross-entropy over the batch's targets, and their number (the gathered head)."""
    logits, targets = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS],
                                    batch.get(TARGETS_AT))
    if targets.numel() == 0:  # no target in the batch: a zero that still backpropagates
        return logits.sum() * 0.0, 0
    return F.cross_entropy(logits.float(), targets, reduction="sum"), int(targets.numel())


def mlm_loss(model, batch: dict) -> torch.Tensor:
    """The MLM loss of `model(**batch).loss` (mean cross-entropy over targets), with the gathered head."""
    total, count = mlm_loss_sum(model, batch)
    return total / max(count, 1)


class MaskedLMLoss(torch.nn.Module):
    """The summed MLM loss as a module, so DistributedDataParallel (and torch.compile) wrap the
    gathered head's forward: DDP syncs gradients only for a forward that ran through it."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> torch.Tensor:
        return mlm_loss_sum(self.model, batch)[0]
