"""Train a masked-LM model (BERT, RoBERTa, ModernBERT, DistilBERT, ELECTRA's generator, or any
AutoModelForMaskedLM) on a MaskBeam output, on one device or data-parallel under torchrun.

    python -m jobs.train --data DIR --output DIR [--model NAME_OR_DIR | --arch bert --config tiny] [options]
    python -m jobs.train --nproc_per_node 2 --data DIR --output DIR [options]     (2 ranks on this machine)
    torchrun --nproc_per_node 2 -m jobs.train --data DIR --output DIR [options]   (or several machines)
    ... --resume     (continues the checkpoint in --output, on any number of processes)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import MISSING, fields

from pipeline.console import setup_logging
from pipeline.console.arguments import OneLineParser
from pipeline.console.preflight import missing_folder
from pipeline.consumers.training.config import REPORTERS, TrainConfig, reporters

# torch, transformers and the readers are imported once the command line is checked (see `parse`).

_CASTS = {"int": int, "float": float, "int | None": int, "float | None": float, "str": str, "str | None": str}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m jobs.train", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(TrainConfig):
        help_text, default = f.metadata["help"], None if f.default is MISSING else f.default
        if str(f.type) == "bool":  # a flag that is on by default is turned off with --no_NAME, its help its own
            flag = f"--no_{f.name}" if default else f"--{f.name}"
            p.add_argument(flag, dest=f.name, action="store_false" if default else "store_true",
                           help=f.metadata["off_help"] if default else f"{help_text} (default: off)")
            continue
        shown = "" if f.name in ("data", "output") or "default" in help_text else \
            f" (default: {'none' if default is None else default})"
        p.add_argument(f"--{f.name}", type=_CASTS[str(f.type)], default=default, choices=f.metadata.get("choices"),
                       help=help_text + shown, metavar=None if f.metadata.get("choices") else f.name.upper())
    p.add_argument("--nproc_per_node", type=int, default=1, metavar="N",
                   help="data-parallel ranks to start on this machine (one per GPU; gloo processes on the CPU), "
                        "as torchrun's flag; Ctrl-C stops them all with one line (default: 1; under torchrun: "
                        "leave it out)")
    return p


def _without_launch_flag(argv: list[str]) -> list[str]:
    """The arguments every rank gets: all but --nproc_per_node N (or =N)."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc_per_node":
            skip = True
        elif not arg.startswith("--nproc_per_node="):
            rest.append(arg)
    return rest


def parse(argv: list[str] | None) -> TrainConfig:
    p = parser()
    options = vars(p.parse_args(argv))
    nproc = options.pop("nproc_per_node")
    if nproc < 1:
        p.error(f"--nproc_per_node must be >= 1, got {nproc}")
    if nproc > 1 and "RANK" in os.environ:
        p.error("--nproc_per_node starts the ranks itself: leave it out under torchrun")
    cfg = TrainConfig(**options)
    for name in ("data", "output"):
        if not getattr(cfg, name):
            p.error(f"--{name} is required")
    for name in ("batch_size", "grad_accum", "epochs", "save_total_limit"):
        if getattr(cfg, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(cfg, name)}")
    for name in ("max_steps", "warmup_steps", "eval_every", "eval_rows", "save_every", "save_minutes", "num_workers",
                 "log_every", "max_tokens", "max_minutes", "save_pretrained_every"):
        value = getattr(cfg, name)
        if value is not None and value < 0 or name == "max_steps" and value == 0:
            p.error(f"--{name} must be {'>= 1' if name == 'max_steps' else '>= 0'}, got {value}")
    if not 0 < cfg.decay_fraction <= 1:
        p.error(f"--decay_fraction must be in (0, 1], got {cfg.decay_fraction}")
    if cfg.max_grad_norm < 0:
        p.error(f"--max_grad_norm must be >= 0 (0: no clipping), got {cfg.max_grad_norm}")
    if cfg.lr <= 0:
        p.error(f"--lr must be > 0, got {cfg.lr}")
    for name in ("adam_beta1", "adam_beta2", "hidden_dropout", "attention_dropout"):
        value = getattr(cfg, name)
        if value is not None and not 0 <= value < 1:
            p.error(f"--{name} must be in [0, 1), got {value}")
    if cfg.adam_epsilon <= 0:
        p.error(f"--adam_epsilon must be > 0, got {cfg.adam_epsilon}")
    if not 0 <= cfg.min_lr_ratio <= 1:
        p.error(f"--min_lr_ratio must be in [0, 1], got {cfg.min_lr_ratio}")
    unknown = [name for name in reporters(cfg.report_to) if name not in REPORTERS]
    if unknown:
        p.error(f"--report_to {unknown[0]!r}: choose {', '.join(REPORTERS)}, several comma-separated, or none")
    from pipeline.consumers.training.reporting import ReporterError, check_reporters

    try:
        check_reporters(cfg.report_to)
    except ReporterError as error:
        p.error(str(error))
    if cfg.model and not _model_exists(cfg.model):
        p.error(f"--model {cfg.model!r}: no such folder, and not a Hub id")
    if cfg.probe and not os.path.isfile(cfg.probe):
        p.error(f"--probe {cfg.probe!r}: no such file")
    if missing_folder(cfg.data):
        p.error(f"--data {missing_folder(cfg.data)}")
    from pipeline.consumers.outputs import load_manifest

    try:
        load_manifest(cfg.data)
    except FileNotFoundError as error:
        p.error(str(error))
    return cfg


def _model_exists(name: str) -> bool:
    """A local folder, or something shaped like a Hub id (`name` or `org/name`)."""
    return os.path.isdir(name) or (not name.startswith((".", "/", "~")) and name.count("/") <= 1)


def run(argv: list[str] | None = None) -> dict:
    """Parse and check the options, then train; returns the final validation metrics ({} without a
    validation split). Ctrl-C/SIGTERM: SystemExit 130/143 after a checkpoint, with one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(args)
    from pipeline.consumers.training.launcher import launch_ranks
    from pipeline.consumers.training.loop import TrainingInterrupted, train

    nproc = parser().parse_args(args).nproc_per_node  # checked by parse()
    if nproc > 1:  # this process only starts the ranks, which parse and check the same flags again
        code = launch_ranks("jobs.train", _without_launch_flag(args), nproc)
        if code:
            raise SystemExit(code)
        return _final_metrics(cfg.output)
    try:
        return train(cfg, args)
    except TrainingInterrupted as stopped:  # rank 0 has logged the one line with the --resume command
        raise SystemExit(stopped.exit_code) from None
    except (ValueError, OSError) as error:
        raise SystemExit(f"jobs.train: {error}") from None


def _final_metrics(output: str) -> dict:
    """What `train` returned on rank 0: the last row of metrics.jsonl when it is the final evaluation."""
    from pipeline.consumers.training.metrics import METRICS_FILE

    with open(os.path.join(output, METRICS_FILE), encoding="utf-8") as handle:
        last = json.loads(handle.read().splitlines()[-1])
    return {k: v for k, v in last.items() if k != "step"} if "eval_loss" in last else {}


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    try:
        run(argv)
    except KeyboardInterrupt:  # a second Ctrl-C before the checkpoint was written, or one before the handlers
        from pipeline.consumers.training.ranks import StopRequests

        what = "interrupted twice" if StopRequests.received else "interrupted while starting"
        print(f"jobs.train: {what}, stopped without saving (the last checkpoint, if any, is intact)",
              file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
