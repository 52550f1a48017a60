"""A map-style PyTorch Dataset over the shard files of one split (static or dynamic masks).

Only paths travel to DataLoader workers; each process opens the shards on first use (`OpenShards`)
and copies the rows of a batch straight from the files (`pipeline.storage.shard_rows`). Remote
shards come through a `ShardCache` (`SplitFiles`). A dynamic row's mask is
`mask_rows(row, mask_seed, epoch)`: the same in any worker, rank or process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch.utils.data import Dataset

from pipeline.consumers.loading.open_shards import OpenShards
from pipeline.consumers.loading.split_files import ManifestMismatch, SplitFiles
from pipeline.consumers.outputs import first_outside, load_manifest, masking_rule, outside_error
from pipeline.kernels.rows.masking import MaskingRule, mask_rows
from pipeline.storage.shard_cache import ShardCache
from pipeline.storage.shard_rows import DEFAULT_READ_MODE, READ_MODES, Column, MappedShard, PreadShard
from pipeline.storage.shard_windows import ShardWindows
from schemas import manifest as m
from schemas import options as o
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED, MASKING_STATIC


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

    A remote output (s3://, gs://, hf://) is read from verified copies in `cache_dir`, which holds at
    most `cache_limit` bytes: the whole split when it fits, else windows of shards that the sampler
    drives (`sampler_options()`); `self.cache` owns the downloads and `close()` ends them.
    """

    def __init__(self, directory: str, split: str = m.TRAIN, epoch: int = 0, *, cache_dir: str | None = None,
                 cache_limit: int | None = None, keep_cached: Sequence[str] = (),
                 read_mode: str = DEFAULT_READ_MODE) -> None:
        """`keep_cached`: cached copies of another split read alongside (the validation split while
        training) that this dataset's cache management never evicts; their bytes count in `cache_limit`.

        Raises:
            ValueError: a bad `read_mode` or split; a shard whose manifest rows cannot fit its file
                (`ManifestMismatch`), checked before anything is sized by them.
            ShardCacheError: a remote split cannot be cached (limit, a download not matching).
        """
        if read_mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {', '.join(READ_MODES)}, got {read_mode!r}")
        self.read_mode = read_mode
        manifest = load_manifest(directory)
        config = manifest[m.KEY_CONFIG]
        seq_len = config[o.MAX_SEQ_LENGTH]
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
            raise ManifestMismatch(f"{o.MAX_SEQ_LENGTH} must be a positive integer, got {seq_len!r}")
        self.seq_len = seq_len
        self.static = config[o.MASKING] == MASKING_STATIC
        self.files = SplitFiles(directory, manifest, split, self.seq_len, self.static, cache_dir=cache_dir,
                                cache_limit=cache_limit, keep_cached=keep_cached)
        self.paths = self.files.paths
        self.offsets = np.cumsum([0, *self.files.rows], dtype=np.int64)
        self.rule: MaskingRule = masking_rule(manifest)
        self.vocab_size = self.rule.vocab_size
        self.epoch = epoch
        third = LABELS if self.static else MASK_SEED
        self.columns = [Column(INPUT_IDS, self.seq_len), Column(ATTENTION_MASK, self.seq_len),
                        Column(third, self.seq_len if self.static else 0)]
        self.window_shards = self.files.window_shards  # > 0: a cache smaller than the split; read window by window
        # Windowed: the previous and current windows stay open (with the next one on disk, the three windows the
        # cache has room for); otherwise at most MAX_OPEN_SHARDS.
        self.open_shards = OpenShards(self.columns, read_mode, 2 * self.window_shards or None)

    @property
    def cache(self) -> ShardCache | None:
        """The shard cache of a remote output (None for a local one)."""
        return self.files.cache

    @property
    def windows(self) -> ShardWindows | None:
        """The windows of a remote split larger than the cache (None otherwise; main process only)."""
        return self.files.windows

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
        return {"shard_rows": np.diff(self.offsets).tolist(), "window_shards": self.window_shards,
                "windows": self.windows}

    def close(self) -> None:
        """Close the shard files and stop the cache's downloads (also done at interpreter exit)."""
        self.open_shards.close()
        self.files.close()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _shard(self, i: int) -> PreadShard | MappedShard:
        return self.open_shards.get(i, self._local_copy, int(self.offsets[i + 1] - self.offsets[i]))

    def _local_copy(self, i: int) -> str:
        return self.files.local_copy(i, keep=self.open_shards.recent())

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
        self._check_vocabulary(ids, INPUT_IDS, None, shard_of, in_shard)
        if self.static:
            self._check_vocabulary(third, LABELS, IGNORE_INDEX, shard_of, in_shard)
        if self.static:
            labels = third
        else:
            ids, labels, _ = mask_rows(ids, third, epoch, self.rule)
        return {INPUT_IDS: ids, ATTENTION_MASK: attention, LABELS: labels}

    def _check_vocabulary(self, values: np.ndarray, column: str, ignore: int | None, shard_of: np.ndarray,
                          in_shard: np.ndarray) -> None:
        """Every id of the batch inside the vocabulary, before an embedding or a loss indexes by it
        (the shard's checksum only says it is the manifest's; a forged manifest describes a forged
        shard): ShardMismatch naming the shard, the row and the value."""
        found = first_outside(values, self.vocab_size, ignore)
        if found is not None:
            row, position = found
            raise outside_error(self.paths[int(shard_of[row])], int(in_shard[row]), column,
                                int(values[row, position]), position, self.vocab_size)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        batch = self.__getitems__([index])
        return {key: value[0] for key, value in batch.items()}
