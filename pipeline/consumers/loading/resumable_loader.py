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
        batches = super().__iter__()
        try:
            for batch in batches:
                self.sampler.advance(_batch_rows(batch))
                yield widen(batch) if self.widen_batches else batch
        except Exception as error:
            # A batch that failed (a bad shard row, raised in a worker) leaves the workers waiting for
            # indices, and they ignore SIGTERM (`ignore_stop_signals`): the interpreter's exit would wait
            # on them forever. Stop them now, as the iterator does when it is collected.
            shutdown = getattr(batches, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            plain = _unwrapped(error)
            if plain is error:
                raise
            raise plain from error
        self.sampler.complete()  # run to its end: rows dropped by drop_last count as consumed too

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def _unwrapped(error: Exception) -> Exception:
    """An error raised in a DataLoader worker arrives with the worker's traceback in its message
    (torch's ExceptionWrapper): the same error with the original one-line message (the traceback
    stays in the chained error, for --log_level DEBUG); any other error as it is."""
    text = str(error)
    if "\nOriginal Traceback" not in text:
        return error
    last = text.rstrip().rsplit("\n", 1)[-1]
    try:
        return type(error)(last.split(": ", 1)[1] if ": " in last else last)
    except Exception:  # noqa: BLE001 - an error type that cannot be built from a message: left as torch made it
        return error


def widen(batch: dict) -> dict:
    """int64 copies of a batch's integer tensors (what embedding layers and the loss expect)."""
    return {k: v.long() if isinstance(v, torch.Tensor) and v.dtype != torch.int64 and not v.is_floating_point()
            else v for k, v in batch.items()}


def _batch_rows(batch) -> int:
    if isinstance(batch, dict):
        return len(next(iter(batch.values())))
    return len(batch)
