"""Batches for BertForMaskedLM from the dataset's pre-batched dicts or from HF `datasets` rows, with
the mask epoch shared with DataLoader workers; and the transformers callback that keeps it current."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import get_spawning_popen

import numpy as np
import torch

from pipeline.consumers.outputs import load_manifest, masking_rule
from pipeline.kernels.rows.masking import MaskingRule, mask_rows
from schemas.shard import ATTENTION_MASK, INPUT_IDS, LABELS, MASK_SEED

PAD_TO_MULTIPLE_OF = 8


class MlmCollator:
    """Batches for BertForMaskedLM: int64 `input_ids`, `attention_mask`, `labels` (-100 off-target).

    Accepts a pre-batched dict (from `MlmShardDataset.__getitems__`) or a list of rows (HF
    `datasets` rows inside `transformers.Trainer`). Rows with a `mask_seed` and no `labels` (dynamic
    output) are masked here at `self.epoch`, so pass `rule` and keep the epoch current with
    `MaskEpochCallback`. `trim_padding` cuts columns after the longest row (rounded up to 8).
    """

    def __init__(self, rule: MaskingRule | None = None, epoch: int = 0, trim_padding: bool = False,
                 compact: bool = False) -> None:
        self.rule = rule
        self.trim_padding = trim_padding
        # compact: ids and labels in the stored integer type (int16 for BERT), attention as int8, so a
        # DataLoader worker hands the main process a fifth of the bytes; `ResumableLoader` (or
        # `widen`) makes them int64 there.
        self.compact = compact
        # Shared memory: DataLoader workers started from this process (persistent ones too) read the
        # epoch the main process sets, instead of the value their copy had when they started.
        self._epoch = multiprocessing.Value("q", epoch, lock=False)

    @classmethod
    def for_output(cls, directory: str, **kwargs) -> MlmCollator:
        return cls(rule=masking_rule(load_manifest(directory)), **kwargs)

    @property
    def epoch(self) -> int:
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch.value = epoch

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if get_spawning_popen() is None:  # a copy, not a worker being started: detach from the shared value
            state["_epoch"] = int(self._epoch.value)
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["_epoch"], int):
            state["_epoch"] = multiprocessing.Value("q", state["_epoch"], lock=False)
        self.__dict__.update(state)

    def _stack(self, rows: list[dict]) -> dict[str, np.ndarray]:
        # explicit dtypes: a list of Python ints above 2**63 would otherwise become float64
        keys = [k for k in (INPUT_IDS, ATTENTION_MASK, LABELS, MASK_SEED) if k in rows[0]]
        return {k: np.asarray([r[k] for r in rows], dtype=np.uint64 if k == MASK_SEED else np.int64) for k in keys}

    def __call__(self, batch) -> dict[str, torch.Tensor]:
        arrays = self._stack(batch) if isinstance(batch, list) else batch
        ids = arrays[INPUT_IDS]
        labels = arrays.get(LABELS)
        if labels is None:
            if self.rule is None or MASK_SEED not in arrays:
                raise ValueError("rows have neither labels nor mask_seed+rule: cannot build MLM labels")
            ids32 = ids if ids.dtype in (np.int16, np.int32) else ids.astype(np.int32)
            ids, labels, _ = mask_rows(ids32, arrays[MASK_SEED], self.epoch, self.rule)
        attention = arrays[ATTENTION_MASK]
        if self.trim_padding:
            longest = int(np.asarray(attention).sum(axis=1).max())
            width = min(ids.shape[1], -(-longest // PAD_TO_MULTIPLE_OF) * PAD_TO_MULTIPLE_OF)
            ids, attention, labels = ids[:, :width], attention[:, :width], labels[:, :width]
        if self.compact:
            dtype = np.int16 if ids.dtype == np.int16 and labels.dtype == np.int16 else np.int32
            return {
                INPUT_IDS: torch.from_numpy(np.ascontiguousarray(ids, dtype=dtype)),
                ATTENTION_MASK: torch.from_numpy(np.ascontiguousarray(attention, dtype=np.int8)),
                LABELS: torch.from_numpy(np.ascontiguousarray(labels, dtype=dtype)),
            }
        return {
            INPUT_IDS: torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)),
            ATTENTION_MASK: torch.from_numpy(np.ascontiguousarray(attention, dtype=np.int64)),
            LABELS: torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64)),
        }


def epoch_callback(collator: MlmCollator, dataset=None):
    """A transformers TrainerCallback that sets the mask epoch at each epoch start.

    The collator's epoch lives in shared memory, so DataLoader workers (persistent or not) mask
    with it; after a resume at epoch 1.6 the rest of epoch 1 is masked as epoch 1.
    """
    from transformers import TrainerCallback

    class MaskEpochCallback(TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kwargs):
            epoch = int(np.floor((state.epoch or 0) + 1e-6))
            collator.set_epoch(epoch)
            if dataset is not None:
                dataset.set_epoch(epoch)

    return MaskEpochCallback()
