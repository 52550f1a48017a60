"""Consume shards in PyTorch: a memory-mapped map-style Dataset (static or dynamic masks), a
collator for batches and for HF Trainer, and a resumable distributed sampler.

Only paths travel to DataLoader workers; each process memory-maps the shards on first use.
A dynamic row's mask is `mask_rows(row, mask_seed, epoch)`: the same in any worker, rank or process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from pipeline.consumers.outputs import load_manifest, masking_rule, shard_paths
from pipeline.kernels.masking import MaskingRule, mask_rows
from pipeline.storage.arrow_files import fixed_list_to_numpy, open_batches
from schemas import manifest as m
from schemas import options as o
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED, MASKING_STATIC

PAD_TO_MULTIPLE_OF = 8


@dataclass
class _Block:
    """One record batch of a shard as numpy views into the memory map (no copy)."""

    ids: np.ndarray  # (n, L)
    attention: np.ndarray  # (n, L)
    labels_or_seeds: np.ndarray  # (n, L) labels, or (n,) mask seeds


def _open_blocks(path: str, seq_len: int, static: bool) -> list[_Block]:
    third = LABELS if static else MASK_SEED
    blocks = []
    for batch in open_batches(path):
        blocks.append(_Block(
            ids=fixed_list_to_numpy(batch.column(INPUT_IDS), seq_len),
            attention=fixed_list_to_numpy(batch.column(ATTENTION_MASK), seq_len),
            labels_or_seeds=(fixed_list_to_numpy(batch.column(third), seq_len) if static
                             else batch.column(third).to_numpy()),
        ))
    return blocks


class MlmShardDataset(Dataset):
    """The rows of one split of a MaskBeam output.

    Items are dicts of numpy arrays (`input_ids`, `attention_mask`, `labels`); `__getitems__`
    fetches and masks a whole batch in one kernel call. For dynamic output `set_epoch(e)` changes
    every mask; for static output the stored masks are returned as they are.

    An index i >= len(dataset) addresses row i % len at epoch `self.epoch + i // len`: a sampler
    built with `tag_epoch=True` sends the epoch with every index, so persistent DataLoader workers
    (which never see `set_epoch` on the main process's copy) still mask with the right epoch.
    Static output has one stored mask per row (per `--dupe_factor` copy): every epoch repeats it.

    Shards are memory-mapped record batch by record batch; rows are copied only into the batch
    being built, so every DataLoader worker and rank shares the page cache instead of a heap copy.
    """

    def __init__(self, directory: str, split: str = m.TRAIN, epoch: int = 0) -> None:
        manifest = load_manifest(directory)
        config = manifest[m.KEY_CONFIG]
        self.paths = shard_paths(directory, manifest, split)
        rows = [s[m.KEY_ROWS] for s in manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]]
        self.offsets = np.cumsum([0] + rows)
        self.seq_len = int(config[o.MAX_SEQ_LENGTH])
        self.static = config[o.MASKING] == MASKING_STATIC
        self.rule: MaskingRule = masking_rule(manifest)
        self.vocab_size = self.rule.vocab_size
        self.epoch = epoch
        self._blocks: list[_Block] | None = None
        self._block_offsets = np.zeros(1, dtype=np.int64)
        self._pid = -1

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_blocks"], state["_pid"] = None, -1  # workers map the files themselves
        return state

    def _opened(self) -> list[_Block]:
        """Every record batch of every shard, mapped once per process."""
        if self._blocks is None or self._pid != os.getpid():
            self._blocks = [block for p in self.paths for block in _open_blocks(p, self.seq_len, self.static)]
            self._block_offsets = np.cumsum([0] + [b.ids.shape[0] for b in self._blocks])
            if int(self._block_offsets[-1]) != len(self):
                raise ValueError(f"shards hold {int(self._block_offsets[-1])} rows, the manifest says {len(self)}")
            self._pid = os.getpid()
        return self._blocks

    def __getitems__(self, indices: list[int]) -> dict[str, np.ndarray]:
        blocks = self._opened()
        tagged = np.asarray(indices, dtype=np.int64)
        if tagged.size and tagged.min() < 0:
            raise IndexError(f"negative index {tagged.min()}")
        epochs, index = np.divmod(tagged, max(len(self), 1))
        if not self.static and epochs.size and epochs.min() != epochs.max():
            raise IndexError("one batch must not mix epochs")
        epoch = self.epoch + (int(epochs[0]) if epochs.size else 0)
        which = np.searchsorted(self._block_offsets, index, side="right") - 1
        local = index - self._block_offsets[which]
        ids = np.empty((index.size, self.seq_len), dtype=blocks[0].ids.dtype if blocks else np.int32)
        attention = np.empty((index.size, self.seq_len), dtype=np.int8)
        third = np.empty((index.size, self.seq_len) if self.static else index.size,
                         dtype=ids.dtype if self.static else np.uint64)
        order = np.argsort(which, kind="stable")  # rows grouped by record batch, one gather each
        starts = np.flatnonzero(np.diff(which[order], prepend=-1))
        for start, stop in zip(starts, [*starts[1:], order.size]):
            rows = order[start:stop]
            block, at = blocks[which[rows[0]]], local[rows]
            ids[rows] = block.ids[at]
            attention[rows] = block.attention[at]
            third[rows] = block.labels_or_seeds[at]
        if self.static:
            labels = third
        else:
            ids, labels, _ = mask_rows(ids, third, epoch, self.rule)
        return {INPUT_IDS: ids, ATTENTION_MASK: attention, LABELS: labels}

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        batch = self.__getitems__([index])
        return {key: value[0] for key, value in batch.items()}


class MlmCollator:
    """Batches for BertForMaskedLM: int64 `input_ids`, `attention_mask`, `labels` (-100 off-target).

    Accepts a pre-batched dict (from `MlmShardDataset.__getitems__`) or a list of rows (HF
    `datasets` rows inside `transformers.Trainer`). Rows with a `mask_seed` and no `labels` (dynamic
    output) are masked here at `self.epoch`, so pass `rule` and keep the epoch current with
    `MaskEpochCallback`. `trim_padding` cuts columns after the longest row (rounded up to 8).
    """

    def __init__(self, rule: MaskingRule | None = None, epoch: int = 0, trim_padding: bool = False) -> None:
        self.rule = rule
        self.epoch = epoch
        self.trim_padding = trim_padding

    @classmethod
    def for_output(cls, directory: str, **kwargs) -> MlmCollator:
        return cls(rule=masking_rule(load_manifest(directory)), **kwargs)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

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
        return {
            INPUT_IDS: torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)),
            ATTENTION_MASK: torch.from_numpy(np.ascontiguousarray(attention, dtype=np.int64)),
            LABELS: torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64)),
        }


class ResumableSampler(Sampler[int]):
    """A deterministic, rank-disjoint, resumable order of dataset indices.

    The permutation of epoch e is a pure function of (seed, e); rank r takes every world_size-th
    index (padded by wrapping, as DistributedSampler does, so ranks step together). `position` is how
    many of this rank's indices were already consumed in the current epoch: restoring
    {"epoch", "position"} yields exactly what an uninterrupted run would have yielded next.
    """

    def __init__(self, n: int, *, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 tag_epoch: bool = False) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if n <= 0:
            raise ValueError(f"cannot sample from {n} rows")
        self.n, self.seed, self.rank, self.world_size, self.shuffle = n, seed, rank, world_size, shuffle
        self.tag_epoch = tag_epoch  # yield epoch * n + index (see MlmShardDataset)
        self.epoch = 0
        self.position = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def order(self) -> np.ndarray:
        order = (np.random.Generator(np.random.PCG64([self.seed, self.epoch])).permutation(self.n)
                 if self.shuffle else np.arange(self.n))
        per_rank = -(-self.n // self.world_size)
        order = np.resize(order, per_rank * self.world_size)  # wrap to equal shares
        return order[self.rank :: self.world_size]

    def __len__(self) -> int:
        return -(-self.n // self.world_size)

    def __iter__(self):
        order = self.order()[self.position :]
        return iter((order + self.epoch * self.n if self.tag_epoch else order).tolist())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed or state["world_size"] != self.world_size:
            raise ValueError(f"sampler state is for seed {state['seed']} and world size {state['world_size']}, "
                             f"not {self.seed} and {self.world_size}")
        self.epoch, self.position = state["epoch"], state["position"]


def epoch_callback(collator: MlmCollator, dataset: MlmShardDataset | None = None):
    """A transformers TrainerCallback that sets the mask epoch at each epoch start."""
    from transformers import TrainerCallback

    class MaskEpochCallback(TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kwargs):
            epoch = int(round(state.epoch or 0))
            collator.set_epoch(epoch)
            if dataset is not None:
                dataset.set_epoch(epoch)

    return MaskEpochCallback()


__all__ = ["MlmShardDataset", "MlmCollator", "ResumableSampler", "epoch_callback", "IGNORE_INDEX"]
