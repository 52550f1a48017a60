"""The data side of `jobs.train`: the train and validation splits of a MaskBeam output (remote ones
through the shard cache), the validation batches each rank evaluates, and the steps an epoch gives."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from pipeline.consumers.distributed import Ranks, ignore_stop_signals
from pipeline.consumers.loader import MlmCollator, MlmShardDataset, ResumableSampler
from pipeline.consumers.outputs import load_manifest, tokenizer_spec
from pipeline.consumers.training import TrainConfig
from pipeline.storage import filesystem
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas import options as o

_log = logging.getLogger("maskbeam.train")


@dataclass
class TrainData:
    train: MlmShardDataset
    validation: MlmShardDataset | None  # None: no validation rows, so no evaluation
    spec: TokenizerSpec
    seq_len: int
    target_share: float  # the share of positions that are targets (the masking probability)

    @property
    def has_validation(self) -> bool:
        return self.validation is not None

    def validation_batches(self, cfg: TrainConfig, ranks: Ranks) -> DataLoader:
        """This rank's share of the first `eval_batches` validation batches (all of them with 0): the
        same batches whatever the number of ranks, so an evaluation does not depend on it."""
        n, size = len(self.validation), cfg.batch_size
        batches = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
        batches = batches[: cfg.eval_batches] if cfg.eval_batches else batches
        return DataLoader(self.validation, batch_sampler=batches[ranks.rank:: ranks.world_size],
                          collate_fn=MlmCollator(compact=True), num_workers=cfg.num_workers,
                          worker_init_fn=ignore_stop_signals if cfg.num_workers else None,
                          generator=torch.Generator().manual_seed(cfg.seed))  # no draw from the global RNG


def load_data(cfg: TrainConfig, ranks: Ranks) -> TrainData:
    """The splits of `cfg.data`. An empty (or absent) validation split turns evaluation off with one
    warning: a loss over no targets would read as a perfect 0.0."""
    cache = {"cache_dir": cfg.cache_dir, "cache_limit": cfg.cache_limit, "read_mode": cfg.read_mode}
    manifest = load_manifest(cfg.data)
    validation = None
    if manifest[m.KEY_SPLITS].get(m.VALIDATION, {}).get(m.KEY_SHARDS):
        # A remote validation split is cached whole and kept: the train split's cache (windows, when it is
        # larger than the limit) works in what the limit leaves, so evaluations never download again.
        validation = MlmShardDataset(cfg.data, m.VALIDATION, **cache)
        if len(validation) == 0:
            validation = None
    if validation is None and ranks.is_main:
        _log.warning("%s has no validation rows (preprocess with a larger --validation_fraction): training "
                     "without evaluation", cfg.data)
    kept = [] if validation is None or filesystem.is_local(cfg.data) else validation.paths
    train = MlmShardDataset(cfg.data, m.TRAIN, keep_cached=kept, **cache)
    if len(train) == 0:
        raise ValueError(f"{cfg.data} has no train rows: nothing to train on")
    share = float(manifest[m.KEY_CONFIG].get(o.MLM_PROBABILITY, 0.15))
    return TrainData(train, validation, tokenizer_spec(cfg.data), train.seq_len, share)


def steps_left(sampler: ResumableSampler, cfg: TrainConfig, world_size: int) -> int:
    """Optimizer steps until the end of epoch `cfg.epochs - 1`, from where `sampler` stands: each rank
    takes its share of what is left of the epoch, whole batches (drop_last), whole steps."""
    def steps(rows_left: int) -> int:
        per_rank = -(-rows_left // world_size)
        return per_rank // cfg.batch_size // cfg.grad_accum

    left = steps(sampler.n - sampler.base - sampler.position * world_size) if sampler.epoch < cfg.epochs else 0
    return left + max(0, cfg.epochs - 1 - sampler.epoch) * steps(sampler.n)
