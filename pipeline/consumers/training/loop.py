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
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm import tqdm

from pipeline.console import human_seconds
from pipeline.consumers.loading import MlmCollator, ResumableLoader, ResumableSampler
from pipeline.consumers.training.batches import TOKENS, StepCollator, targets_of, to_device
from pipeline.consumers.training.checkpoints import CHECKPOINT_FILE, load_checkpoint, rng_state, save_checkpoint
from pipeline.consumers.training.config import GPU_WORKERS, TrainConfig
from pipeline.consumers.training.data import TrainData, load_data, run_total
from pipeline.consumers.training.evaluation import evaluate
from pipeline.consumers.training.loss import MaskedLMLoss
from pipeline.consumers.training.metrics import METRICS_FILE, MetricsLog, StepRows, plot_metrics, truncate_jsonl
from pipeline.consumers.training.mfu import flops_per_token, peak_flops
from pipeline.consumers.training.models import build_model
from pipeline.consumers.training.optimizer import adamw, apply_gradients
from pipeline.consumers.training.precision import Precision, precision_for
from pipeline.consumers.training.probe import probe
from pipeline.consumers.training.ranks import Ranks, StopRequests, ignore_stop_signals, init_ranks
from pipeline.consumers.training.reporting import Reporters
from pipeline.consumers.training.run_folders import (
    CONFIG_FILE,
    attach_log_file,
    check_run_folder,
    check_shared_output,
    clean_failed_run,
    resume_command,
)
from pipeline.consumers.training.saved_model import drop_exports_after, export_model, save_model
from pipeline.consumers.training.schedule import lr_scheduler, warmup_clipped
from pipeline.consumers.training.seeding import seed_dropout, seed_weights
from schemas.shard import LABELS

_log = logging.getLogger("maskbeam.train")


class TrainingInterrupted(Exception):
    """Ctrl-C or SIGTERM: a checkpoint was saved at a step boundary; `exit_code` is 130 or 143."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


@dataclass
class Run:
    """One rank's run: what `build_run` makes, and where the steps stand."""

    cfg: TrainConfig
    ranks: Ranks
    stop: StopRequests
    argv: list[str]
    resuming: bool
    data: TrainData
    model: torch.nn.Module
    loss_module: torch.nn.Module  # MaskedLMLoss, inside DDP on several ranks
    step_loss: torch.nn.Module  # loss_module, compiled with --compile
    sampler: ResumableSampler
    loader: ResumableLoader
    workers: int
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    precision: Precision
    step: int
    total: int
    log: MetricsLog
    saved_step: int | None  # the newest checkpoint's step (None: none yet)
    tokens: int = 0  # real tokens trained on, over the ranks and the resumes (--max_tokens)
    saved_at: float = field(default_factory=time.monotonic)

    @property
    def device(self) -> torch.device:
        return self.ranks.device

    @property
    def main(self) -> bool:
        return self.ranks.is_main

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.cfg.output, CHECKPOINT_FILE)

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.cfg.output, METRICS_FILE)


def _run(cfg: TrainConfig, ranks: Ranks, stop: StopRequests, argv: list[str], resuming: bool) -> dict:
    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights", "Writing model shards": bars do not belong in a log
    run = build_run(cfg, ranks, stop, argv, resuming)
    try:
        _evaluate_at_start(run)
        _train_steps(run)
        return _finish(run)
    finally:
        run.log.close()  # the reporters' files complete, whatever ended the run


def build_run(cfg: TrainConfig, ranks: Ranks, stop: StopRequests, argv: list[str], resuming: bool,
              loss: Callable[[torch.nn.Module], torch.nn.Module] = MaskedLMLoss) -> Run:
    """The data, model, loader, optimizer and schedule of this rank, resumed from the checkpoint when
    `resuming`, the RNG seeded (`seeding`); a stop request during start-up stops here. `loss`: the
    module of the summed loss around the model (the benchmark swaps in the full head)."""
    device, main = ranks.device, ranks.is_main
    seed_weights(cfg.seed)
    data: TrainData = load_data(cfg, ranks)
    _stop_at_start(ranks, stop, argv, resuming)
    precision = precision_for(cfg.precision, device)
    model = build_model(data.spec, data.seq_len, device, model=cfg.model, arch=cfg.arch, size=cfg.config,
                        hidden_dropout=cfg.hidden_dropout, attention_dropout=cfg.attention_dropout,
                        gradient_checkpointing=cfg.gradient_checkpointing).to(device)
    model.train()  # from_pretrained gives a model in eval mode: no dropout until an evaluation switched it back
    loss_module = loss(model)
    if ranks.distributed:
        loss_module = DistributedDataParallel(loss_module, device_ids=[device.index] if device.type == "cuda" else None)
    step_loss = torch.compile(loss_module, dynamic=True) if cfg.compile else loss_module  # gathered: shapes vary
    sampler = ResumableSampler(len(data.train), seed=cfg.seed, rank=ranks.rank, world_size=ranks.world_size,
                               tag_epoch=True, **data.train.sampler_options())
    workers = cfg.num_workers if cfg.num_workers is not None else GPU_WORKERS if device.type == "cuda" else 0
    # workers ship int16/int8 batches (a fifth of the bytes) with their target positions; widened on the device
    loader = ResumableLoader(
        data.train, sampler=sampler, drop_last=True, widen=False, batch_size=cfg.batch_size,
        collate_fn=StepCollator(MlmCollator(trim_padding=cfg.trim_padding, compact=True)), num_workers=workers,
        pin_memory=device.type == "cuda", worker_init_fn=ignore_stop_signals if workers else None,
        generator=torch.Generator().manual_seed(cfg.seed))  # its draws stay off the global RNG (dropout)
    optimizer = adamw(model, cfg.lr, cfg.weight_decay, device, betas=(cfg.adam_beta1, cfg.adam_beta2),
                      eps=cfg.adam_epsilon, fp16=precision.name == "fp16")
    checkpoint_path = os.path.join(cfg.output, CHECKPOINT_FILE)
    ckpt = load_checkpoint(checkpoint_path) if resuming else None
    step = 0
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
    tokens = int(ckpt.get("tokens", 0)) if ckpt is not None else 0
    if cfg.max_tokens and tokens >= cfg.max_tokens:
        raise ValueError(f"the run is complete: it trained on {tokens:,} tokens, --max_tokens {cfg.max_tokens:,} "
                         "(raise it)")
    warmup_clipped(cfg, total)
    scheduler = lr_scheduler(optimizer, cfg, total)
    seed_dropout(cfg.seed, ranks.rank, ckpt, ranks.world_size)
    metrics_path = os.path.join(cfg.output, METRICS_FILE)
    if ckpt is not None:  # the optimizer after the scheduler, whose construction sets the lr of step 0
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt.get("scaler"):
            precision.scaler.load_state_dict(ckpt["scaler"])
        _log.info("resumed at step %d (epoch %d, sample %d) from %d ranks onto %d", step, ckpt["sampler"]["epoch"],
                  ckpt["sampler"]["global_position"], ckpt.get("world_size", 1), ranks.world_size)
        if main:
            truncate_jsonl(metrics_path, step)
            drop_exports_after(cfg.output, step)
            for name in sorted(os.listdir(cfg.output)):  # every world size's: a rank of the killed run may be gone
                if name.startswith("samples-rank") and name.endswith(".jsonl"):
                    truncate_jsonl(os.path.join(cfg.output, name), step)
    elif main:
        open(metrics_path, "w").close()
        cfg.save(os.path.join(cfg.output, CONFIG_FILE))
    _stop_at_start(ranks, stop, argv, resuming)
    reporters = Reporters(cfg, main, resumed_at=step if ckpt is not None else None)
    return Run(cfg, ranks, stop, argv, resuming, data, model, loss_module, step_loss, sampler, loader, workers,
                optimizer, scheduler, precision, step, total, MetricsLog(metrics_path if main else None, reporters),
                saved_step=step if ckpt is not None else None, tokens=tokens)


def _evaluation(run: Run) -> dict | None:
    """The metrics, {} without validation rows, None when a stop request abandoned it."""
    if not run.data.has_validation:
        return {}
    return evaluate(run.model, run.data.validation_batches(run.cfg, run.ranks, run.workers), run.device,
                    run.ranks.sum, should_stop=lambda: bool(run.stop.signal), autocast=run.precision.autocast)


def _evaluate_at_start(run: Run) -> None:
    if run.step == 0 and run.data.has_validation:
        run.stop.where = "before the first step (the evaluation at step 0 is abandoned)"
        metrics = _evaluation(run)
        if metrics is not None:
            run.log({"step": 0, **metrics}, announce=True)
    run.stop.where = f"after step {run.step}" if run.step else "before the first step"


def _checkpoint(run: Run, at_step: int, sampler_state: dict, rng: dict) -> None:
    """Save the state of the step boundary `at_step` (rank 0 writes, every rank's RNG in it)."""
    if run.saved_step == at_step:  # already saved at this boundary
        return
    rngs = run.ranks.gather(rng)  # each rank's dropout stream
    if run.main:
        save_checkpoint(run.checkpoint_path, {
            "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(), "scaler": run.precision.scaler.state_dict(),
            "sampler": sampler_state, "rng": rng, "rng_ranks": rngs, "step": at_step, "total_steps": run.total,
            "tokens": run.tokens,
            "world_size": run.ranks.world_size, "config": vars(run.cfg)},
            keep=run.cfg.save_total_limit, previous_step=run.saved_step)
        run.log.flush()
    run.saved_step, run.saved_at = at_step, time.monotonic()
    run.ranks.barrier()  # no rank runs ahead of (or exits before) the checkpoint


def optimizer_step(run: Run, group: list[dict], step_targets: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward of the step's micro-batches (gradients synced on the last one only), then
    the clipped, scaled optimizer step. Returns this rank's loss sum and the gradient norm, both
    left on the device (nothing here waits for the GPU)."""
    scale, loss_sum = run.ranks.world_size / max(step_targets, 1), torch.zeros((), device=run.device)
    scaler = run.precision.scaler
    for i, batch in enumerate(group):
        batch = to_device(batch, run.device)
        sync = i == len(group) - 1 or not run.ranks.distributed
        with (contextlib.nullcontext() if sync else run.loss_module.no_sync()), run.precision.autocast():
            loss = run.step_loss(batch)
        scaler.scale(loss * scale).backward()  # DDP averages over ranks: the step's loss is sum / step_targets
        loss_sum += loss.detach()
    grad_norm = apply_gradients(run.optimizer, scaler, run.model.parameters(), run.cfg.max_grad_norm)
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return loss_sum, grad_norm


def _interrupted(run: Run, sigint: bool, boundary: tuple[dict, dict]) -> TrainingInterrupted:
    """Every rank stops at the same step, with the boundary's state saved."""
    if run.step == 0:
        _stop_at_start(run.ranks, run.stop, run.argv, run.resuming)  # nothing to save yet
    _checkpoint(run, run.step, *boundary)
    message = (f"jobs.train: stopped by {'SIGINT' if sigint else 'SIGTERM'} at step {run.step} of {run.total}, "
               f"checkpoint saved; continue with: {resume_command(run.argv, run.ranks.world_size)}")
    if run.main:  # before the last barrier: under torchrun, the launcher stops the others at the first exit
        _log.warning("%s", message)
    run.ranks.barrier()
    return TrainingInterrupted(message, 130 if sigint else 143)


def _train_steps(run: Run) -> None:
    """The optimizer steps from `run.step` to `run.total`: one small control all-reduce per step
    (targets, tokens, stop requests, the checkpoint clock), the loss read at logging steps only."""
    cfg, ranks, stop, data = run.cfg, run.ranks, run.stop, run.data
    fpt, peak = flops_per_token(run.model, data.seq_len, data.target_share), peak_flops(run.device)
    bar = tqdm(total=run.total, initial=run.step, desc="train", disable=None if run.main else True)
    log_lines = cfg.log_every if not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()) else 0
    flush_every = max(cfg.log_every, 1)
    _log.info("training %s on %s: %d step%s of %d x %d x %d rows (%d rows per epoch), device %s, %s", cfg.model or
              f"a {cfg.config} {cfg.arch} from scratch", cfg.data, run.total, "" if run.total == 1 else "s",
              cfg.batch_size, cfg.grad_accum, ranks.world_size, len(data.train), run.device, run.precision.name)
    samples_log = os.path.join(cfg.output, f"samples-rank{ranks.rank}.jsonl") if cfg.log_samples else None
    rows = StepRows(run.log, ranks.sum)
    run_started, first_step = time.perf_counter(), run.step
    boundary = (run.sampler.state_dict(), rng_state())  # the state at the last step boundary
    budget_left, train_started = True, time.monotonic()
    while run.step < run.total and budget_left:
        waited, started = 0.0, time.perf_counter()
        for group in _groups(run.loader, cfg.grad_accum):
            waited += time.perf_counter() - started
            now = time.monotonic()
            time_due = run.main and cfg.save_minutes > 0 and now - run.saved_at >= 60 * cfg.save_minutes
            out_of_time = run.main and cfg.max_minutes > 0 and now - train_started >= 60 * cfg.max_minutes
            step_targets, step_tokens, sigterm, sigint, time_due, out_of_time = ranks.sum([
                sum(targets_of(b) for b in group), sum(b[TOKENS] for b in group), stop.signal == 15,
                stop.signal == 2, time_due, out_of_time])  # rank 0's clocks decide for all
            if sigterm or sigint:
                rows.flush()
                raise _interrupted(run, bool(sigint), boundary)
            stop.where = f"after step {run.step + 1}"  # a request from now on is seen at the next boundary
            if samples_log is not None:
                _log_samples(samples_log, run.sampler, group, run.step + 1, ranks.rank)
            loss_sum, grad_norm = optimizer_step(run, group, step_targets)
            run.step += 1
            run.tokens += int(step_tokens)
            step = run.step
            budget_left = not (out_of_time or cfg.max_tokens and run.tokens >= cfg.max_tokens)
            stop.where = f"after step {step}"
            boundary = (run.sampler.state_dict(), rng_state())
            elapsed = time.perf_counter() - started
            row = {"step": step, "lr": run.scheduler.get_last_lr()[0], "tokens_per_s": step_tokens / elapsed,
                   "data_wait": waited / elapsed}
            if peak:
                row["mfu"] = row["tokens_per_s"] * fpt / (peak * ranks.world_size)
            rows.add(row, loss_sum, grad_norm, step_targets)
            bar.update()
            evaluating = (cfg.eval_every and step % cfg.eval_every == 0 and step < run.total and budget_left
                          and data.has_validation)  # else the final evaluation follows
            saving = (cfg.save_every and step % cfg.save_every == 0) or time_due or step == run.total or not budget_left
            if step % flush_every == 0 or evaluating or saving:
                flushed = rows.flush()
                last = flushed[-1]
                bar.set_postfix(loss=f"{last['loss']:.3f}", tok_s=f"{last['tokens_per_s']:,.0f}")
                if log_lines and (step % log_lines == 0 or step == run.total):
                    per_step = (time.perf_counter() - run_started) / (step - first_step)
                    _log.info("step %d/%d  loss %.4f  lr %.2e  tokens/s %s  ETA %s", step, run.total, last["loss"],
                              last["lr"], f"{last['tokens_per_s']:,.0f}", human_seconds(per_step * (run.total - step)))
            if evaluating:
                stop.where = f"after step {step}, abandoning the evaluation"
                metrics = _evaluation(run)
                if metrics is not None:  # else abandoned for a stop request, which the next boundary honours
                    run.log({"step": step, **metrics}, announce=True)
                stop.where = f"after step {step}"
            if saving:
                _checkpoint(run, step, *boundary)
            if cfg.save_pretrained_every and step % cfg.save_pretrained_every == 0 and run.main:
                export_model(run.model, data.spec, data.seq_len, cfg.output, step, cfg.save_total_limit)
            if not budget_left:
                _log.info("step %d of %d: %s reached, ending the run", step, run.total,
                          f"--max_minutes {cfg.max_minutes:g}" if out_of_time else f"--max_tokens {cfg.max_tokens:,}")
                break
            if step >= run.total:
                break
            waited, started = 0.0, time.perf_counter()
        else:
            run.sampler.set_epoch(run.sampler.epoch + 1)
    rows.flush()
    bar.close()


def _finish(run: Run) -> dict:
    """The final evaluation and the saved model; a stop request abandons the evaluation only."""
    run.stop.where = f"after the last step ({run.step}, saved): the final evaluation is abandoned, the model saved"
    final = _evaluation(run)
    if final:
        run.log({"step": run.step, **final}, announce=True)
    if run.main:
        _save_final(run)
    if final is None:
        sigterm, _ = _stop_requested(run.stop, run.ranks)
        message = (f"jobs.train: stopped by {'SIGTERM' if sigterm else 'SIGINT'} during the final evaluation: the "
                   f"model of step {run.step} of {run.total} is saved in {run.cfg.output}, without its final "
                   "evaluation")
        if run.main:
            _log.warning("%s", message)
        run.ranks.barrier()
        raise TrainingInterrupted(message, 143 if sigterm else 130)
    return final


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


def _save_final(run: Run) -> None:
    cfg = run.cfg
    tokenizer = save_model(run.model, run.data.spec, run.data.seq_len, cfg.output)
    _log.info("saved the model and its tokenizer to %s (metrics: %s)", cfg.output, run.metrics_path)
    if cfg.probe:
        for line in probe(run.model, tokenizer, cfg.probe, run.device):
            print(line)
    if cfg.plot:
        plot_metrics(run.metrics_path, cfg.plot)
