"""Consume shards in PyTorch: a map-style Dataset over the shard files (static or dynamic masks), a
collator for batches and for HF Trainer, and a resumable distributed sampler.

Only paths travel to DataLoader workers; each process opens the shards on first use and copies the
rows of a batch straight from the files (`pipeline.storage.shard_rows`).
A dynamic row's mask is `mask_rows(row, mask_seed, epoch)`: the same in any worker, rank or process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from multiprocessing.context import get_spawning_popen

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from pipeline.consumers.outputs import load_manifest, masking_rule, shard_paths
from pipeline.kernels.masking import MaskingRule, mask_rows
from pipeline.storage import filesystem
from pipeline.storage.shard_cache import (
    ShardCacheError,
    ShardWindows,
    cached_shards,
    fetch,
    local_path,
    window_size,
)
from pipeline.storage.shard_rows import (
    DEFAULT_READ_MODE,
    READ_MODES,
    Column,
    MappedShard,
    PreadShard,
    ShardLayout,
    open_shard,
)
from schemas import manifest as m
from schemas import options as o
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED, MASKING_STATIC

PAD_TO_MULTIPLE_OF = 8
# Shard files one process keeps open (a file descriptor each): a large output has thousands of shards
# and a random batch touches hundreds; the least recently used are closed (pread reopens one with a
# single open, its layout kept) so a worker stays under the usual limit of 1,024 open files.
MAX_OPEN_SHARDS = 256


class MlmShardDataset(Dataset):
    """The rows of one split of a MaskBeam output.

    Items are dicts of numpy arrays (`input_ids`, `attention_mask`, `labels`); `__getitems__`
    fetches and masks a whole batch in one kernel call. For dynamic output `set_epoch(e)` changes
    every mask; for static output the stored masks are returned as they are.

    An index i >= len(dataset) addresses row i % len at epoch `self.epoch + i // len`: a sampler
    built with `tag_epoch=True` sends the epoch with every index, so persistent DataLoader workers
    (which never see `set_epoch` on the main process's copy) still mask with the right epoch.
    Static output has one stored mask per row (per `--dupe_factor` copy): every epoch repeats it.

    Rows are copied from the shard files only into the batch being built, so every DataLoader worker
    and rank shares the kernel's page cache instead of holding a heap copy. `read_mode="pread"` (the
    default on POSIX) copies each row with a pread system call: a worker's RSS holds its batches
    whatever the size of the output. `read_mode="mmap"` gathers from memory maps instead (no system
    call per row; the pages read count in every worker's RSS, shared and reclaimable).
    """

    def __init__(self, directory: str, split: str = m.TRAIN, epoch: int = 0, *, cache_dir: str | None = None,
                 cache_limit: int | None = None, keep_cached: Sequence[str] = (),
                 read_mode: str = DEFAULT_READ_MODE) -> None:
        """`keep_cached`: cached copies of another split read alongside (the validation split while
        training) that this dataset's cache management never evicts; their bytes count in `cache_limit`."""
        if read_mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {', '.join(READ_MODES)}, got {read_mode!r}")
        self.read_mode = read_mode
        manifest = load_manifest(directory)
        config = manifest[m.KEY_CONFIG]
        entries = manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]
        self.paths = shard_paths(directory, manifest, split)
        self._remote: list[tuple[str, str, int]] | None = None
        self._cache = (cache_dir, cache_limit)
        self._pinned = [str(p) for p in keep_cached]
        self.window_shards = 0  # > 0: a cache smaller than the split; read window by window
        self.windows: ShardWindows | None = None
        self.prefetched = False  # a windowed sampler's prefetcher manages the cache
        if not filesystem.is_local(directory):  # s3://, gs://, hf://: verified local copies, read as local
            shards = [(path, e[m.KEY_SHA256], e[m.KEY_BYTES]) for path, e in zip(self.paths, entries)]
            self._remote = shards  # a copy evicted since (by another dataset or process) is fetched again
            kept = sum(os.path.getsize(p) for p in self._pinned if os.path.exists(p))
            budget = None if cache_limit is None else cache_limit - kept
            if budget is None or sum(size for _, _, size in shards) <= budget:
                self.paths = cached_shards(shards, cache_dir, cache_limit, keep=self._pinned)
            else:
                try:
                    self.window_shards = window_size([size for _, _, size in shards], budget)
                except ShardCacheError as error:
                    if not kept:
                        raise
                    raise ShardCacheError(f"{error} (the limit less the {kept / 1e6:,.0f} MB of kept copies of "
                                          "another split, e.g. the validation split)") from None
                self.windows = ShardWindows(shards, cache_dir, cache_limit, pinned=self._pinned)
                self.paths = [local_path(cache_dir, sha) for _, sha, _ in shards]
        self.offsets = np.cumsum([0] + [e[m.KEY_ROWS] for e in entries])
        self.seq_len = int(config[o.MAX_SEQ_LENGTH])
        self.static = config[o.MASKING] == MASKING_STATIC
        self.rule: MaskingRule = masking_rule(manifest)
        self.vocab_size = self.rule.vocab_size
        self.epoch = epoch
        third = LABELS if self.static else MASK_SEED
        self.columns = [Column(INPUT_IDS, self.seq_len), Column(ATTENTION_MASK, self.seq_len),
                        Column(third, self.seq_len if self.static else 0)]
        self._shards: OrderedDict[int, PreadShard | MappedShard] = OrderedDict()  # open, least recent first
        self._layouts: dict[int, ShardLayout] = {}
        self._pid = -1

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def sampler_options(self) -> dict:
        """Keyword arguments for `ResumableSampler` that make it read this dataset window by window
        (and prefetch the next window) when its shards come through a cache smaller than the split;
        {} otherwise."""
        if not self.window_shards:
            return {}
        self.prefetched = True  # before the DataLoader copies the dataset into its workers
        return {"shard_rows": np.diff(self.offsets).tolist(), "window_shards": self.window_shards,
                "on_window": self.windows.enter}

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_shards"], state["_layouts"], state["_pid"] = OrderedDict(), {}, -1  # workers open the files
        state["windows"] = None  # the prefetcher stays with the sampler, in the main process
        return state

    def _shard(self, i: int) -> PreadShard | MappedShard:
        """Shard i, opened once per process."""
        if self._pid != os.getpid():
            self._shards, self._layouts, self._pid = OrderedDict(), {}, os.getpid()
        if i in self._shards:
            self._shards.move_to_end(i)
            return self._shards[i]
        shard = None
        for attempt in range(3):
            path = self._local_copy(i) if self._remote is not None else self.paths[i]
            try:
                shard = open_shard(path, self.columns, self.read_mode, self._layouts.get(i))
                break
            except FileNotFoundError:  # evicted by another process between the fetch and the open
                if self._remote is None or attempt == 2:
                    raise
        expected = int(self.offsets[i + 1] - self.offsets[i])
        if shard.rows != expected:
            shard.close()
            raise ValueError(f"shard {path} holds {shard.rows} rows, the manifest says {expected}")
        self._shards[i] = shard
        if shard.layout is not None:
            self._layouts[i] = shard.layout
        # Windowed: the previous and current windows stay open (with the next one on disk, the three
        # windows the cache has room for); older ones are closed. Otherwise at most MAX_OPEN_SHARDS stay open.
        while len(self._shards) > (2 * self.window_shards if self.window_shards else MAX_OPEN_SHARDS):
            self._shards.popitem(last=False)[1].close()
        return shard

    def _local_copy(self, i: int) -> str:
        """The cached copy of remote shard i, downloaded again if it is gone."""
        cache_dir, limit = self._cache
        # A windowed sampler's prefetcher alone evicts (it knows the windows to keep); otherwise (an
        # evaluation pass, a split that fits) this process evicts all but the shards it has open.
        open_now = list(self._shards)[-(2 * self.window_shards - 1):] if self.window_shards else list(self._shards)
        keep = {*self._pinned, *(self.paths[j] for j in open_now)}
        return fetch(*self._remote[i], cache_dir, limit=None if self.prefetched else limit, keep=keep)

    def __getitems__(self, indices: list[int]) -> dict[str, np.ndarray]:
        tagged = np.asarray(indices, dtype=np.int64)
        if tagged.size and tagged.min() < 0:
            raise IndexError(f"negative index {tagged.min()}")
        epochs, index = np.divmod(tagged, max(len(self), 1))
        if not self.static and epochs.size and epochs.min() != epochs.max():
            raise IndexError("one batch must not mix epochs")
        epoch = self.epoch + (int(epochs[0]) if epochs.size else 0)
        shard_of = np.searchsorted(self.offsets, index, side="right") - 1
        in_shard = index - self.offsets[shard_of]
        outs = None
        for i in np.unique(shard_of).tolist():
            shard = self._shard(i)
            if outs is None:
                outs = [np.empty((index.size, self.seq_len) if c.width else index.size, dtype=dtype)
                        for c, dtype in zip(self.columns, shard.dtypes)]
            rows_here = np.flatnonzero(shard_of == i)
            shard.gather(in_shard[rows_here], rows_here, outs)
        if outs is None:
            outs = [np.empty((0, self.seq_len), dtype=np.int32), np.empty((0, self.seq_len), dtype=np.int8),
                    np.empty((0, self.seq_len), dtype=np.int32) if self.static else np.empty(0, dtype=np.uint64)]
        ids, attention, third = outs
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


class ResumableSampler(Sampler[int]):
    """A deterministic, rank-disjoint, elastically resumable order of dataset indices.

    The global sample stream of epoch e is a pure function of (seed, e): a permutation of the n rows.
    From a global position g, rank r of N ranks takes stream[g + r], stream[g + r + N], ...; the tail
    is padded by wrapping to equal shares (as DistributedSampler), so ranks step together. A saved
    state holds the global position (samples consumed by all ranks together), so a run saved on N
    ranks resumes on any N' ranks with exactly the samples an uninterrupted run would consume next.

    `position` counts this rank's samples consumed since the segment began. A DataLoader's workers
    prefetch ahead of what the training loop has consumed, so the sampler cannot count consumption
    itself: `ResumableLoader` advances it batch by batch as batches reach the loop (or call
    `advance(k)` yourself). `state_dict()` in the middle of an epoch that nobody counted raises
    instead of silently replaying the epoch.
    """

    def __init__(self, n: int, *, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 tag_epoch: bool = False, shard_rows: list[int] | None = None, window_shards: int = 0,
                 on_window: Callable[[list[int], list[int], list[int]], None] | None = None) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if n <= 0:
            raise ValueError(f"cannot sample from {n} rows")
        if window_shards and (shard_rows is None or sum(shard_rows) != n):
            raise ValueError("window_shards needs shard_rows, the rows of every shard, summing to n")
        self.n, self.seed, self.rank, self.world_size, self.shuffle = n, seed, rank, world_size, shuffle
        self.tag_epoch = tag_epoch  # yield epoch * n + index (see MlmShardDataset)
        self.shard_rows = list(shard_rows or [])
        self.window_shards = window_shards if shuffle else 0
        # called on entering a window with its shards, the next window's and those of earlier windows
        # whose rows are not all consumed yet
        self.on_window = on_window
        self.epoch = 0
        self.base = 0  # global stream position where this segment of the epoch began (0, or a resumed one)
        self.position = 0
        self._yielded = 0  # indices handed out by the current iterator
        self._counted = False  # whether consumption was reported (advance) since the iterator started

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning; the current epoch (a resumed one) is left as it is."""
        if epoch != self.epoch:
            self.epoch, self.base, self.position = epoch, 0, 0

    def windows(self, epoch: int) -> list[list[int]]:
        """The shards of each window of `epoch`, in reading order (windowed sampling only)."""
        shards = np.random.Generator(np.random.PCG64([self.seed, epoch, 1])).permutation(len(self.shard_rows))
        return [shards[i: i + self.window_shards].tolist() for i in range(0, len(shards), self.window_shards)]

    def _epoch_order(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The permutation of the n rows for this epoch, and (windowed) the window of each position.

        Windowed: shards are shuffled and grouped k at a time; rows are shuffled within each window,
        so a reader needs only a window's shards at a time. Both are functions of (seed, epoch)."""
        if not self.shuffle:
            return np.arange(self.n), None
        if not self.window_shards:
            return np.random.Generator(np.random.PCG64([self.seed, self.epoch])).permutation(self.n), None
        offsets = np.cumsum([0, *self.shard_rows])
        rows, windows = [], []
        for w, shards in enumerate(self.windows(self.epoch)):
            ids = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in shards])
            rows.append(ids[np.random.Generator(np.random.PCG64([self.seed, self.epoch, 2, w])).permutation(ids.size)])
            windows.append(np.full(ids.size, w))
        return np.concatenate(rows), np.concatenate(windows)

    def _padded(self, values: np.ndarray) -> np.ndarray:
        left = self.n - self.base
        return np.resize(values, self.base + -(-left // self.world_size) * self.world_size)

    def stream(self) -> np.ndarray:
        """The global order of this epoch from `base`, padded by wrapping to a multiple of world_size."""
        return self._padded(self._epoch_order()[0])

    def order(self) -> np.ndarray:
        """This rank's indices of the current segment."""
        return self.stream()[self.base + self.rank :: self.world_size]

    def __len__(self) -> int:
        return -(-(self.n - self.base) // self.world_size)

    def __iter__(self):
        order, windows = self._epoch_order()
        mine = slice(self.base + self.rank, None, self.world_size)
        order = self._padded(order)[mine][self.position :]
        self._yielded, self._counted = 0, False
        values = (order + self.epoch * self.n if self.tag_epoch else order).tolist()
        if windows is None or self.on_window is None:
            for value in values:
                self._yielded += 1
                yield value
            return
        window_of = self._padded(windows)[mine][self.position :].tolist()
        plan = self.windows(self.epoch)
        current, start = -1, self.position
        for value, window in zip(values, window_of):
            if window != current:
                current = window
                upcoming = plan[window + 1] if window + 1 < len(plan) else self.windows(self.epoch + 1)[0]
                # DataLoader workers still gather rows handed out before: the windows from the oldest
                # row not yet consumed (known when ResumableLoader counts consumption) stay cached.
                oldest = window_of[min(self.position - start, len(window_of) - 1)] if self._counted else window
                self.on_window(plan[window], upcoming, [i for w in range(oldest, window) for i in plan[w]])
            self._yielded += 1
            yield value

    def advance(self, k: int) -> None:
        """`k` more of this rank's samples reached the training loop."""
        self.position += k
        self._counted = True

    @property
    def global_position(self) -> int:
        return min(self.base + self.position * self.world_size, self.n)

    def state_dict(self) -> dict:
        if self._yielded and not self._counted and self.position < len(self):
            raise RuntimeError("ResumableSampler.state_dict() in the middle of an epoch whose consumption nobody "
                               "counted: iterate through ResumableLoader (or call sampler.advance(batch_rows) per "
                               "batch), else a resumed run would replay or skip samples")
        return {"epoch": self.epoch, "global_position": self.global_position, "position": self.position,
                "seed": self.seed, "n": self.n, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        """Resume where `state` was saved, on this sampler's own world size (which may differ)."""
        if state["seed"] != self.seed or state.get("n", self.n) != self.n:
            raise ValueError(f"sampler state is for seed {state['seed']} and {state.get('n')} rows, "
                             f"not {self.seed} and {self.n}")
        global_position = state.get("global_position", state["position"] * state["world_size"])
        if global_position >= self.n:  # the saved epoch was complete: the next one starts
            self.epoch, self.base, self.position = state["epoch"] + 1, 0, 0
        else:
            self.epoch, self.base, self.position = state["epoch"], global_position, 0


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


def epoch_callback(collator: MlmCollator, dataset: MlmShardDataset | None = None):
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


__all__ = ["MlmShardDataset", "MlmCollator", "ResumableSampler", "ResumableLoader", "epoch_callback", "widen",
           "IGNORE_INDEX"]
