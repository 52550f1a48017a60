"""Consume shards in PyTorch: the public names (`from pipeline.consumers.loading import ...`), one
concept per module:

    open_shards.py       the shard files a process has open (pread or mmap readers, a cap on descriptors)
    split_files.py       where a split's shard files are read from (in place, or a `ShardCache`), rows checked
    dataset.py           MlmShardDataset: the rows of a split, masked per epoch
    sampler.py           ResumableSampler: deterministic, rank-disjoint, resumable order (window by window)
    collator.py          MlmCollator and the transformers epoch callback
    resumable_loader.py  ResumableLoader: counts consumption for an exact sampler state; `widen`

The cache itself (downloads, eviction, partial files, shutdown, locks between processes) is
`pipeline.storage.shard_cache`, its windows `pipeline.storage.shard_windows`.
"""

from pipeline.consumers.loading.collator import MlmCollator, epoch_callback
from pipeline.consumers.loading.dataset import MlmShardDataset
from pipeline.consumers.loading.resumable_loader import ResumableLoader, widen
from pipeline.consumers.loading.sampler import ResumableSampler
from schemas.shard import IGNORE_INDEX

__all__ = ["MlmShardDataset", "MlmCollator", "ResumableSampler", "ResumableLoader", "epoch_callback", "widen",
           "IGNORE_INDEX"]
