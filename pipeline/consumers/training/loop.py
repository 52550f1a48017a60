"""The training loop of `jobs.train`: nanoGPT-style, on one process or on the ranks torchrun starts.

One seed call, a resumable sampler per rank (the global position makes a checkpoint resumable on any
number of ranks), gradient accumulation with `no_sync`, a loss normalised by the targets of the whole
step (so 2 ranks x 2 micro-batches equal 1 rank x 4), evaluation of a fixed sample shared by the ranks,
atomic checkpoints every --save_every steps or --save_minutes (each rank's RNG in them), and
Ctrl-C/SIGTERM acknowledged at once and honoured at the next step boundary (an evaluation is abandoned,
start-up stops before the first step).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm import tqdm

from pipeline.console import human_seconds
from pipeline.consumers.loading import MlmCollator, ResumableLoader, ResumableSampler, widen
from pipeline.consumers.training.checkpoints import (
    CHECKPOINT_FILE,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from pipeline.consumers.training.data import TrainData, load_data, run_total
from pipeline.consumers.training.helpers import (
    CONFIG_FILE,
    METRICS_FILE,
    TrainConfig,
    autocast,
    decay_groups,
    evaluate,
    flops_per_token,
    hf_tokenizer,
    lr_at,
    mlm_loss_sum,
    peak_flops,
    plot_metrics,
    probe,
)
from pipeline.consumers.training.models import build_model
from pipeline.consumers.training.ranks import Ranks, StopRequests, ignore_stop_signals, init_ranks
from pipeline.consumers.training.run_folders import (
    attach_log_file,
    check_run_folder,
    check_shared_output,
    clean_failed_run,
    resume_command,
)
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, LABELS

_log = logging.getLogger("maskbeam.train")


class TrainingInterrupted(Exception):
    """Ctrl-C or SIGTERM: a checkpoint was saved at a step boundary; `exit_code` is 130 or 143."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class MaskedLMLoss(torch.nn.Module):
    """The summed MLM loss as a module, so DistributedDataParallel (and torch.compile) wrap the
    gathered head's forward: DDP syncs gradients only for a forward that ran through it."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> torch.Tensor:
        return mlm_loss_sum(self.model, batch)[0]


def train(cfg: TrainConfig, argv: list[str] | None = None) -> dict:
    """Train as `cfg` says on this process's rank; returns the final validation metrics ({} without a
    validation split)."""
    ranks = init_ranks()
    finished = False
    try:
        with StopRequests(announce=ranks.is_main) as stop:
            metrics = _train(cfg, ranks, stop, list(sys.argv[1:] if argv is None else argv))
        finished = True
        return metrics
    finally:
        ranks.close(together=finished)


def _train(cfg: TrainConfig, ranks: Ranks, stop: StopRequests, argv: list[str]) -> dict:
    refusal, resuming = None, False
    if ranks.is_main:
        try:
            resuming = check_run_folder(cfg.output, resume=cfg.resume, overwrite=cfg.overwrite)
            os.makedirs(cfg.output, exist_ok=True)
        except (ValueError, OSError) as error:
            refusal = error
    refusal, resuming = ranks.broadcast((refusal, resuming))
    if refusal is not None:
        raise refusal
    if ranks.distributed:
        check_shared_output(cfg.output, ranks)
    handler = attach_log_file(cfg.output) if ranks.is_main else None
    if not ranks.is_main:  # one voice: rank 0 logs; the others only fail loudly
        logging.getLogger("maskbeam").setLevel(logging.ERROR)
    try:
        return _run(cfg, ranks, stop, argv, resuming)
    except TrainingInterrupted:
        raise
    except Exception as error:
        if ranks.is_main and not resuming:
            clean_failed_run(cfg.output, error)
        raise
    finally:
        if handler is not None:
            logging.getLogger("maskbeam").removeHandler(handler)
            handler.close()


def _stop_requested(stop: StopRequests, ranks: Ranks) -> tuple[bool, bool]:
    """(SIGTERM, SIGINT) on any rank: every rank calls this at the same points and agrees."""
    sigterm, sigint = ranks.sum([stop.signal == 15, stop.signal == 2])
    return bool(sigterm), bool(sigint)


def _stop_at_start(ranks: Ranks, stop: StopRequests, argv: list[str], resuming: bool) -> None:
    """A stop request during start-up (data, model, checkpoint): stop before the first step, saving
    nothing (there is nothing new to save)."""
    sigterm, sigint = _stop_requested(stop, ranks)
    if not (sigterm or sigint):
        return
    name = "SIGINT" if sigint else "SIGTERM"
    if resuming:
        message = (f"jobs.train: stopped by {name} before the first step of the resumed run (its checkpoint is "
                   f"unchanged); continue with: {resume_command(argv, ranks.world_size)}")
    else:
        message = (f"jobs.train: stopped by {name} before the first step, nothing saved; the same command starts "
                   "the run again")
    if ranks.is_main:
        _log.warning("%s", message)
    ranks.barrier()
    raise TrainingInterrupted(message, 130 if sigint else 143)


def _run(cfg: TrainConfig, ranks: Ranks, stop: StopRequests, argv: list[str], resuming: bool) -> dict:
    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights", "Writing model shards": bars do not belong in a log
    torch.manual_seed(cfg.seed)
    device, main = ranks.device, ranks.is_main
    data: TrainData = load_data(cfg, ranks)
    _stop_at_start(ranks, stop, argv, resuming)
    model = build_model(data.spec, data.seq_len, device, model=cfg.model, arch=cfg.arch, size=cfg.config).to(device)
    model.train()  # from_pretrained gives a model in eval mode: no dropout until an evaluation switched it back
    torch.manual_seed(cfg.seed + ranks.rank)  # dropout differs by rank; the weights are rank 0's (DDP broadcasts)
    loss_module = MaskedLMLoss(model)
    if ranks.distributed:
        loss_module = DistributedDataParallel(loss_module, device_ids=[device.index] if device.type == "cuda" else None)
    step_loss = torch.compile(loss_module, dynamic=True) if cfg.compile else loss_module  # gathered: shapes vary
    sampler = ResumableSampler(len(data.train), seed=cfg.seed, rank=ranks.rank, world_size=ranks.world_size,
                               tag_epoch=True, **data.train.sampler_options())
    # workers ship int16/int8 batches (a fifth of the bytes); widened to int64 on the device
    train_loader = ResumableLoader(
        data.train, sampler=sampler, drop_last=True, widen=False, batch_size=cfg.batch_size,
        collate_fn=MlmCollator(trim_padding=cfg.trim_padding, compact=True), num_workers=cfg.num_workers,
        pin_memory=device.type == "cuda", worker_init_fn=ignore_stop_signals if cfg.num_workers else None,
        generator=torch.Generator().manual_seed(cfg.seed))  # its draws stay off the global RNG (dropout)
    optimizer = torch.optim.AdamW(decay_groups(model, cfg.weight_decay), lr=cfg.lr, fused=device.type == "cuda")
    step, ckpt_path, metrics_path = 0, os.path.join(cfg.output, CHECKPOINT_FILE), os.path.join(cfg.output, METRICS_FILE)
    ckpt = load_checkpoint(ckpt_path) if resuming else None
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        sampler.load_state_dict(ckpt["sampler"])
        step = ckpt["step"]
    total = run_total(cfg, sampler, ranks.world_size, step, ckpt)
    if -(-len(data.train) // ranks.world_size) // cfg.batch_size // cfg.grad_accum == 0:
        raise ValueError(f"nothing to train: an epoch of {len(data.train)} train rows gives no step of "
                         f"{cfg.batch_size} x {cfg.grad_accum} x {ranks.world_size} rows (lower --batch_size or "
                         "--grad_accum)")
    if total <= step:
        raise ValueError(f"the run is complete at step {step} of {total} (raise --max_steps or --epochs)")
    warmup_clipped(cfg, total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s, cfg, total) / cfg.lr)
    if ckpt is not None:  # the optimizer after the scheduler, whose construction sets the lr of step 0
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        saved_rngs = ckpt.get("rng_ranks") or [ckpt["rng"]]
        if len(saved_rngs) == ranks.world_size:  # each rank's own dropout stream: the curve an uninterrupted run draws
            set_rng_state(saved_rngs[ranks.rank])
        else:  # another world size draws other dropout masks anyway: rank 0's stream, the others re-seeded
            set_rng_state(ckpt["rng"])
            if ranks.rank:
                torch.manual_seed(cfg.seed + 1000003 * step + ranks.rank)
        _log.info("resumed at step %d (epoch %d, sample %d) from %d ranks onto %d", step, ckpt["sampler"]["epoch"],
                  ckpt["sampler"]["global_position"], ckpt.get("world_size", 1), ranks.world_size)
        if main:
            _truncate_jsonl(metrics_path, step)
            for name in sorted(os.listdir(cfg.output)):  # every world size's: a rank of the killed run may be gone
                if name.startswith("samples-rank") and name.endswith(".jsonl"):
                    _truncate_jsonl(os.path.join(cfg.output, name), step)
    elif main:
        open(metrics_path, "w").close()
        cfg.save(os.path.join(cfg.output, CONFIG_FILE))
    log = _logger(metrics_path if main else None)
    _stop_at_start(ranks, stop, argv, resuming)

    def run_eval() -> dict | None:
        """The metrics, {} without validation rows, None when a stop request abandoned it."""
        if not data.has_validation:
            return {}
        return evaluate(model, data.validation_batches(cfg, ranks), device, ranks.sum,
                        should_stop=lambda: bool(stop.signal))

    if step == 0 and data.has_validation:
        stop.where = "before the first step (the evaluation at step 0 is abandoned)"
        metrics = run_eval()
        if metrics is not None:
            log({"step": 0, **metrics}, announce=True)
    stop.where = f"after step {step}" if step else "before the first step"
    fpt, peak = flops_per_token(model, data.seq_len, data.target_share), peak_flops(device)
    bar = tqdm(total=total, initial=step, desc="train", disable=None if main else True)
    log_lines = cfg.log_every if not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()) else 0
    _log.info("training %s on %s: %d step%s of %d x %d x %d rows (%d rows per epoch), device %s", cfg.model or
              f"a {cfg.config} {cfg.arch} from scratch", cfg.data, total, "" if total == 1 else "s", cfg.batch_size,
              cfg.grad_accum, ranks.world_size, len(data.train), device)
    samples_log = os.path.join(cfg.output, f"samples-rank{ranks.rank}.jsonl") if cfg.log_samples else None

    saved = {"step": step if ckpt is not None else None, "at": time.monotonic()}  # the newest checkpoint

    def checkpoint(at_step: int, sampler_state: dict, rng: dict) -> None:
        if saved["step"] == at_step:  # already saved at this boundary
            return
        rngs = ranks.gather(rng)  # each rank's dropout stream
        if main:
            save_checkpoint(ckpt_path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                        "scheduler": scheduler.state_dict(), "sampler": sampler_state, "rng": rng,
                                        "rng_ranks": rngs, "step": at_step, "total_steps": total,
                                        "world_size": ranks.world_size, "config": vars(cfg)},
                            keep=cfg.save_total_limit, previous_step=saved["step"])
        saved.update(step=at_step, at=time.monotonic())
        ranks.barrier()  # no rank runs ahead of (or exits before) the checkpoint

    run_started, first_step = time.perf_counter(), step
    boundary = (sampler.state_dict(), rng_state())  # the state at the last step boundary
    while step < total:
        waited, started = 0.0, time.perf_counter()
        for group in _groups(train_loader, cfg.grad_accum):
            waited += time.perf_counter() - started
            targets = sum(int((b[LABELS] != IGNORE_INDEX).sum()) for b in group)
            time_due = main and cfg.save_minutes > 0 and time.monotonic() - saved["at"] >= 60 * cfg.save_minutes
            step_targets, sigterm, sigint, time_due = ranks.sum([targets, stop.signal == 15, stop.signal == 2,
                                                                 time_due])  # rank 0's clock decides for all
            if sigterm or sigint:  # every rank stops here, at the same step, with the boundary's state
                if step == 0:
                    _stop_at_start(ranks, stop, argv, resuming)  # nothing to save yet
                checkpoint(step, *boundary)
                message = (f"jobs.train: stopped by {'SIGINT' if sigint else 'SIGTERM'} at step {step} of {total}, "
                           f"checkpoint saved; continue with: {resume_command(argv, ranks.world_size)}")
                if main:  # before the last barrier: under torchrun, the launcher stops the others at the first exit
                    _log.warning("%s", message)
                ranks.barrier()
                raise TrainingInterrupted(message, 130 if sigint else 143)
            stop.where = f"after step {step + 1}"  # a request from now on is seen at the next boundary
            if samples_log is not None:
                _log_samples(samples_log, sampler, group, step + 1, ranks.rank)
            scale, loss_sum = ranks.world_size / max(step_targets, 1), torch.zeros((), device=device)
            tokens = sum(int(b[ATTENTION_MASK].sum()) for b in group)
            for i, batch in enumerate(group):
                batch = widen({k: v.to(device, non_blocking=True) for k, v in batch.items()})
                sync = i == len(group) - 1 or not ranks.distributed
                with (contextlib.nullcontext() if sync else loss_module.no_sync()), autocast(device):
                    loss = step_loss(batch)
                (loss * scale).backward()  # DDP averages over ranks: the step's loss is sum / step_targets
                loss_sum += loss.detach()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            stop.where = f"after step {step}"
            boundary = (sampler.state_dict(), rng_state())
            loss_sum, tokens = ranks.sum([loss_sum.item(), tokens])
            elapsed = time.perf_counter() - started
            row = {"step": step, "loss": loss_sum / max(step_targets, 1), "lr": scheduler.get_last_lr()[0],
                   "tokens_per_s": tokens / elapsed, "data_wait": waited / elapsed}
            if peak:
                row["mfu"] = row["tokens_per_s"] * fpt / (peak * ranks.world_size)
            log(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:,.0f}")
            bar.update()
            if log_lines and (step % log_lines == 0 or step == total):
                per_step = (time.perf_counter() - run_started) / (step - first_step)
                _log.info("step %d/%d  loss %.4f  lr %.2e  tokens/s %s  ETA %s", step, total, row["loss"], row["lr"],
                          f"{row['tokens_per_s']:,.0f}", human_seconds(per_step * (total - step)))
            if cfg.eval_every and step % cfg.eval_every == 0 and step < total and data.has_validation:
                stop.where = f"after step {step}, abandoning the evaluation"
                metrics = run_eval()
                if metrics is not None:  # else abandoned for a stop request, which the next boundary honours
                    log({"step": step, **metrics}, announce=True)
                stop.where = f"after step {step}"
            if (cfg.save_every and step % cfg.save_every == 0) or time_due or step == total:
                checkpoint(step, *boundary)
            if step >= total:
                break
            waited, started = 0.0, time.perf_counter()
        else:
            sampler.set_epoch(sampler.epoch + 1)
    bar.close()
    stop.where = f"after the last step ({step}, saved): the final evaluation is abandoned, the model saved"
    final = run_eval()
    if final:
        log({"step": step, **final}, announce=True)
    if main:
        _save_final(model, data, cfg, device, metrics_path)
    if final is None:
        sigterm, _ = _stop_requested(stop, ranks)
        message = (f"jobs.train: stopped by {'SIGTERM' if sigterm else 'SIGINT'} during the final evaluation: the "
                   f"model of step {step} of {total} is saved in {cfg.output}, without its final evaluation")
        if main:
            _log.warning("%s", message)
        ranks.barrier()
        raise TrainingInterrupted(message, 143 if sigterm else 130)
    return final


def warmup_clipped(cfg: TrainConfig, total: int) -> None:
    """A warmup longer than the run never reaches the peak rate: clip it to a tenth of the run, saying so."""
    if cfg.warmup_steps > total:
        clipped = max(1, total // 10)
        _log.warning("--warmup_steps %d is longer than the run's %d steps: warming up over %d steps instead",
                     cfg.warmup_steps, total, clipped)
        cfg.warmup_steps = clipped


def _groups(loader: DataLoader, size: int):
    """The loader's batches `size` at a time (one optimizer step); an epoch's incomplete last group is
    dropped, as drop_last drops an incomplete batch."""
    group = []
    for batch in loader:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []


def _log_samples(path: str, sampler: ResumableSampler, group: list[dict], step: int, rank: int) -> None:
    """The dataset indices of this rank's rows of `step` (the sampler has just handed them out)."""
    rows = sum(len(b[LABELS]) for b in group)
    indices = sampler.order()[sampler.position - rows: sampler.position].tolist()
    with open(path, "a") as handle:
        handle.write(json.dumps({"step": step, "rank": rank, "epoch": sampler.epoch, "indices": indices}) + "\n")


def _save_final(model, data: TrainData, cfg: TrainConfig, device: torch.device, metrics_path: str) -> None:
    model.save_pretrained(cfg.output)
    tokenizer = hf_tokenizer(data.spec, data.seq_len, model)
    tokenizer.save_pretrained(cfg.output)
    _log.info("saved the model and its tokenizer to %s (metrics: %s)", cfg.output, metrics_path)
    if cfg.probe:
        for line in probe(model, tokenizer, cfg.probe, device):
            print(line)
    if cfg.plot:
        plot_metrics(metrics_path, cfg.plot)


def _logger(path: str | None):
    def log(row: dict, announce: bool = False) -> None:
        if path is None:
            return
        with open(path, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        if announce:  # evaluations always reach the log
            _log.info("eval at step %d: %s", row["step"],
                      "  ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "step" and isinstance(v, float)))
    return log


def _truncate_jsonl(path: str, step: int) -> None:
    """On resume, drop rows (metrics, samples) a killed run logged after its last checkpoint (and a
    last line it was killed writing)."""
    rows = []
    if os.path.exists(path):
        with open(path) as handle:
            rows = [line for line in handle if line.endswith("\n") and json.loads(line)["step"] <= step]
    with open(path, "w") as handle:
        handle.writelines(rows)
