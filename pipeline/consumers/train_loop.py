"""The training loop of `jobs.train`: nanoGPT-style, with the helpers of `training.py`.

One seed call, a resumable sampler, gradient accumulation, evaluation and atomic checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from pipeline.console import human_seconds
from pipeline.consumers.loader import MlmCollator, MlmShardDataset, ResumableLoader, ResumableSampler, widen
from pipeline.consumers.outputs import tokenizer_spec
from pipeline.consumers.training import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    TrainConfig,
    autocast,
    build_model,
    evaluate,
    flops_per_token,
    hf_tokenizer,
    lr_at,
    mlm_loss,
    peak_flops,
    plot_metrics,
    probe,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from pipeline.storage import filesystem
from schemas import manifest as m
from schemas.shard import ATTENTION_MASK

_log = logging.getLogger("maskbeam.train")


def train(cfg: TrainConfig) -> dict:
    """Train as `cfg` says; returns the final validation metrics."""
    torch.manual_seed(cfg.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache = {"cache_dir": cfg.cache_dir, "cache_limit": cfg.cache_limit,  # for a remote --data
             "read_mode": cfg.read_mode}
    # A remote validation split is cached whole and kept: the train split's cache (windows, when it
    # is larger than the limit) works in what the limit leaves, so evaluations never download again.
    val_ds = MlmShardDataset(cfg.data, m.VALIDATION, **cache)
    kept = [] if filesystem.is_local(cfg.data) else val_ds.paths
    train_ds = MlmShardDataset(cfg.data, m.TRAIN, keep_cached=kept, **cache)
    spec = tokenizer_spec(cfg.data)
    model = build_model(cfg, train_ds.vocab_size, train_ds.seq_len, spec.pad_id).to(device)
    os.makedirs(cfg.output, exist_ok=True)  # only once the model and data are known to load
    # the epoch travels with the indices; a cache smaller than the split reads window by window
    sampler = ResumableSampler(len(train_ds), seed=cfg.seed, tag_epoch=True, **train_ds.sampler_options())
    collate = MlmCollator(trim_padding=cfg.trim_padding, compact=True)  # workers ship int16: a fifth of the bytes
    loader_args = {"batch_size": cfg.batch_size, "collate_fn": collate, "num_workers": cfg.num_workers,
                   "pin_memory": device.type == "cuda", "generator": torch.Generator().manual_seed(cfg.seed)}
    # counts consumption; int64 on the device after the copy (on CUDA the narrow batch crosses PCIe)
    train_loader = ResumableLoader(train_ds, sampler=sampler, drop_last=True, widen=False, **loader_args)
    val_loader = DataLoader(val_ds, shuffle=False, **{**loader_args, "collate_fn": MlmCollator()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  fused=device.type == "cuda")
    steps_per_epoch = len(train_ds) // (cfg.batch_size * cfg.grad_accum)
    total = cfg.max_steps or cfg.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg, total) / cfg.lr)
    step, epoch, metrics_path = 0, 0, os.path.join(cfg.output, METRICS_FILE)
    ckpt_path = os.path.join(cfg.output, CHECKPOINT_FILE)
    if cfg.resume and os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        sampler.load_state_dict(ckpt["sampler"])
        set_rng_state(ckpt["rng"])
        step, epoch = ckpt["step"], sampler.epoch
        _truncate_metrics(metrics_path, step)
    else:
        open(metrics_path, "w").close()
        cfg.save(os.path.join(cfg.output, CONFIG_FILE))
    def loss_of(batch: dict) -> torch.Tensor:
        return mlm_loss(model, batch)

    loss_of = torch.compile(loss_of) if cfg.compile else loss_of  # the gathered head's shapes vary: dynamic
    log = _logger(metrics_path)
    if step == 0:
        log({"step": 0, **evaluate(model, val_loader, device, cfg.eval_batches)}, announce=True)
    fpt, peak = flops_per_token(model, train_ds.seq_len), peak_flops(device)
    bar = tqdm(total=total, initial=step, desc="train", disable=None)
    # Without a terminal (a batch job, a notebook log) tqdm is off: progress goes to the log instead.
    log_lines = cfg.log_every if not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()) else 0
    _log.info("training %s on %s: %d step%s of %d x %d rows (%d rows per epoch), device %s",
              cfg.model or f"a {cfg.config} BERT from scratch", cfg.data, total, "" if total == 1 else "s",
              cfg.batch_size, cfg.grad_accum, len(train_ds), device)
    run_started, first_step = time.perf_counter(), step
    while step < total:
        micro, tokens, started = 0, 0, time.perf_counter()
        for batch in train_loader:
            batch = widen({k: v.to(device, non_blocking=True) for k, v in batch.items()})
            with autocast(device):
                loss = loss_of(batch) / cfg.grad_accum  # the MLM head only at the targets
            loss.backward()
            tokens += int(batch[ATTENTION_MASK].sum())
            micro += 1
            if micro % cfg.grad_accum:
                continue
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            rate = tokens / (time.perf_counter() - started)
            row = {"step": step, "loss": loss.item() * cfg.grad_accum, "lr": scheduler.get_last_lr()[0],
                   "tokens_per_s": rate}
            if peak:
                row["mfu"] = rate * fpt / peak
            log(row)
            extra = {"mfu": f"{row['mfu']:.1%}"} if peak else {}
            bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{rate:,.0f}", **extra)
            bar.update()
            if log_lines and (step % log_lines == 0 or step == total):
                per_step = (time.perf_counter() - run_started) / (step - first_step)
                _log.info("step %d/%d  loss %.4f  lr %.2e  tokens/s %s  ETA %s", step, total, row["loss"], row["lr"],
                          f"{rate:,.0f}", human_seconds(per_step * (total - step)))
            if cfg.eval_every and step % cfg.eval_every == 0 and step < total:
                log({"step": step, **evaluate(model, val_loader, device, cfg.eval_batches)}, announce=True)
            if (cfg.save_every and step % cfg.save_every == 0) or step == total:
                save_checkpoint(ckpt_path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                            "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(),
                                            "rng": rng_state(), "step": step, "config": vars(cfg)})
            if step >= total:
                break
        else:
            epoch += 1
            sampler.set_epoch(epoch)
            optimizer.zero_grad(set_to_none=True)  # no partial accumulation leaks into the next epoch
    bar.close()
    final = evaluate(model, val_loader, device, cfg.eval_batches)
    log({"step": step, **final}, announce=True)
    model.save_pretrained(cfg.output)
    hf_tokenizer(spec, model.config.max_position_embeddings).save_pretrained(cfg.output)
    _log.info("saved the model and its tokenizer to %s (metrics: %s)", cfg.output, metrics_path)
    if cfg.probe:
        for line in probe(model, hf_tokenizer(spec, model.config.max_position_embeddings), cfg.probe, device):
            print(line)
    if cfg.plot:
        plot_metrics(metrics_path, cfg.plot)
    return final


def _logger(path: str):
    def log(row: dict, announce: bool = False) -> None:
        with open(path, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        if announce:  # evaluations always reach the log
            _log.info("eval at step %d: %s", row["step"],
                      "  ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "step" and isinstance(v, float)))
    return log


def _truncate_metrics(path: str, step: int) -> None:
    """On resume, drop rows a killed run logged after its last checkpoint."""
    rows = []
    if os.path.exists(path):
        with open(path) as handle:
            rows = [line for line in handle if json.loads(line)["step"] <= step]
    with open(path, "w") as handle:
        handle.writelines(rows)
