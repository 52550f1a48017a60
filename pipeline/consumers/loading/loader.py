"""A DataLoader that counts what reached the training loop, so its sampler's state is exact."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from pipeline.consumers.loading.sampler import ResumableSampler


class ResumableLoader(DataLoader):
    """A DataLoader over a ResumableSampler that advances the sampler as each batch reaches the
    loop, so `loader.sampler.state_dict()` (or `loader.state_dict()`) is exact whatever the number
    of workers and their prefetching.

    With `widen` (default), integer tensors arrive as int64 whatever the collator sent: pair it with
    `MlmCollator(compact=True)` so workers ship int16/int8 batches (a fifth of the bytes through shared
    memory) and the widening happens here. `widen=False` leaves them compact, to widen on the GPU.
    """

    def __init__(self, dataset, *, sampler: ResumableSampler, widen: bool = True, **kwargs) -> None:
        if not isinstance(sampler, ResumableSampler):
            raise TypeError("ResumableLoader needs a ResumableSampler")
        super().__init__(dataset, sampler=sampler, **kwargs)
        self.widen_batches = widen

    def __iter__(self):
        for batch in super().__iter__():
            self.sampler.advance(_batch_rows(batch))
            yield widen(batch) if self.widen_batches else batch
        self.sampler.complete()  # run to its end: rows dropped by drop_last count as consumed too

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def widen(batch: dict) -> dict:
    """int64 copies of a batch's integer tensors (what embedding layers and the loss expect)."""
    return {k: v.long() if isinstance(v, torch.Tensor) and v.dtype != torch.int64 and not v.is_floating_point()
            else v for k, v in batch.items()}


def _batch_rows(batch) -> int:
    if isinstance(batch, dict):
        return len(next(iter(batch.values())))
    return len(batch)
