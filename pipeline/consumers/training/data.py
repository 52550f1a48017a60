"""The data side of `jobs.train`: the train and validation splits of a MaskBeam output (remote ones
through the shard cache), the validation batches each rank evaluates, and the steps an epoch gives."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableSampler
from pipeline.consumers.outputs import load_manifest, tokenizer_spec
from pipeline.consumers.training.batches import StepCollator
from pipeline.consumers.training.config import TrainConfig
from pipeline.consumers.training.ranks import Ranks, ignore_stop_signals
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

    def validation_batches(self, cfg: TrainConfig, ranks: Ranks, num_workers: int = 0) -> DataLoader:
        """This rank's share of the evaluation rows (`eval_rows`), in batches of `batch_size`. The rows
        do not depend on the batch size, the ranks or the seed, so neither does the loss, which
        `evaluate` takes over their targets (a sum over targets / targets, not a mean of batch means)."""
        rows, size = eval_rows(len(self.validation), cfg.eval_rows).tolist(), cfg.batch_size
        batches = [rows[i: i + size] for i in range(0, len(rows), size)]
        return DataLoader(self.validation, batch_sampler=batches[ranks.rank:: ranks.world_size],
                          collate_fn=StepCollator(MlmCollator(compact=True)), num_workers=num_workers,
                          worker_init_fn=ignore_stop_signals if num_workers else None,
                          generator=torch.Generator().manual_seed(cfg.seed))  # no draw from the global RNG


EVAL_SAMPLE_SEED = 0x5EED  # one seed for every run, so runs of other --seed values evaluate the same rows


def eval_rows(n: int, rows: int) -> np.ndarray:
    """The validation rows every evaluation reads: all `n` when `rows` is 0 or at least `n`, else one
    row drawn from each of `rows` equal strata of the split. The rows are stored in document order, so
    the strata spread the sample over every book (the first rows would be the first few books)."""
    if not rows or rows >= n:
        return np.arange(n)
    rng = np.random.Generator(np.random.PCG64(EVAL_SAMPLE_SEED))
    starts = np.arange(rows) * n // rows
    ends = np.arange(1, rows + 1) * n // rows  # every stratum holds at least one row (rows < n)
    return starts + (rng.random(rows) * (ends - starts)).astype(np.int64)


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


def run_total(cfg: TrainConfig, sampler: ResumableSampler, world_size: int, step: int,
              checkpoint: dict | None) -> int:
    """The run's length in optimizer steps, which is also the LR schedule's total: --max_steps, or the
    steps of --epochs epochs counted once, at the run's start. A resume keeps the saved total while
    --epochs is the same, so the rate never jumps when the world size (rows per step) changes; the
    run then covers a little more or less than the epochs."""
    if cfg.max_steps:
        return cfg.max_steps
    saved = (checkpoint or {}).get("total_steps")
    before = (checkpoint or {}).get("config", {})
    if saved and before.get("epochs") == cfg.epochs and not before.get("max_steps"):
        fresh = step + steps_left(sampler, cfg, world_size)
        if fresh != saved:
            _log.info("the run keeps the %d steps counted at its start (its LR schedule): on %d rank%s of %d x %d "
                      "rows, --epochs %d would end at step %d", saved, world_size, "" if world_size == 1 else "s",
                      cfg.batch_size, cfg.grad_accum, cfg.epochs, fresh)
        return int(saved)
    return step + steps_left(sampler, cfg, world_size)
