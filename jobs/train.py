"""Train BertForMaskedLM on a MaskBeam output: a short, nanoGPT-style loop.

    python -m jobs.train --data DIR --output DIR [--model bert-base-uncased | --config tiny] [options]
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from pipeline.console import setup_logging
from pipeline.consumers.outputs import load_manifest
from pipeline.consumers.train_loop import train
from pipeline.consumers.training import MODEL_SIZES, TrainConfig
from pipeline.storage.shard_rows import READ_MODES


def parse(argv: list[str] | None) -> TrainConfig:
    parser = argparse.ArgumentParser(prog="python -m jobs.train", description=__doc__.split("\n")[0])
    for f in fields(TrainConfig):
        if str(f.type) == "bool":  # a flag that is on by default is turned off with --no_NAME
            flag = f"--no_{f.name}" if f.default else f"--{f.name}"
            parser.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true")
        else:
            cast = {"int": int, "float": float, "int | None": int}.get(str(f.type), str)
            parser.add_argument(f"--{f.name}", type=cast, default=f.default, required=f.name in ("data", "output"))
    cfg = TrainConfig(**vars(parser.parse_args(argv)))
    for name in ("batch_size", "grad_accum", "epochs"):
        if getattr(cfg, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if cfg.read_mode not in READ_MODES:
        parser.error(f"--read_mode must be one of {', '.join(READ_MODES)}, got {cfg.read_mode!r}")
    if not cfg.model and cfg.config not in MODEL_SIZES:
        parser.error(f"--config must be one of {sorted(MODEL_SIZES)}, got {cfg.config!r}")
    if cfg.model and not _model_exists(cfg.model):
        parser.error(f"--model {cfg.model!r}: no such folder, and not a Hub id")
    try:
        load_manifest(cfg.data)
    except FileNotFoundError as error:
        parser.error(str(error))
    return cfg


def _model_exists(name: str) -> bool:
    """A local folder, or something shaped like a Hub id (`name` or `org/name`)."""
    import os

    return os.path.isdir(name) or (not name.startswith((".", "/", "~")) and name.count("/") <= 1)


def run(argv: list[str] | None = None) -> dict:
    """Parse and check the options, then train; returns the final validation metrics."""
    cfg = parse(argv)
    try:
        return train(cfg)
    except (ValueError, OSError) as error:
        raise SystemExit(f"jobs.train: {error}") from None


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    run(argv)


if __name__ == "__main__":
    main()
