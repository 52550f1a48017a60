"""Consume shards in PyTorch: the public names of `pipeline.consumers.loading` in one place (a map-style
Dataset over the shard files, a collator for batches and for HF Trainer, a resumable distributed
sampler and the DataLoader that counts for it)."""

from pipeline.consumers.loading.collator import MlmCollator, epoch_callback
from pipeline.consumers.loading.dataset import MlmShardDataset
from pipeline.consumers.loading.loader import ResumableLoader, widen
from pipeline.consumers.loading.sampler import ResumableSampler
from schemas.shard import IGNORE_INDEX

__all__ = ["MlmShardDataset", "MlmCollator", "ResumableSampler", "ResumableLoader", "epoch_callback", "widen",
           "IGNORE_INDEX"]
