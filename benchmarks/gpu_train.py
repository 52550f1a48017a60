"""GPU training benchmark: BERT-base and ModernBERT-base at 512 tokens through `jobs.train`'s own step
(its loader, collator, precision, gathered head, DDP and AdamW: `loop.build_run` and
`loop.optimizer_step`), gathered vs full MLM head, on 1 GPU and (when there are more) on all of them.

THE script to run when a GPU machine is lent, from a fresh clone (one command; about 3-4 minutes on
one GPU, a few more on 8):

    pip install -e '.[train]' && python -m benchmarks.gpu_train --json gpu_train.json

(ModernBERT runs on sdpa with padding unless flash-attn is installed: `pip install flash-attn
--no-build-isolation` first to measure it unpadded; each row names the attention it ran.)

It makes its own data: the package's sample books at 512 tokens (bert-base-uncased, dynamic masks),
repeated until every rank has a batch for every timed and warm-up step (8 GPUs x 32 rows x 38 steps
need 9,728 rows; the three books give about 140), unless `--data DIR` names an output already made.
It prints one line per configuration: tokens/s (real tokens, all GPUs), MFU (FLOPs done / the GPUs'
bf16 peak), the share of step time spent waiting for data, peak GPU memory. A configuration that
fails is a row with its `error`; the JSON is written after every configuration, whatever fails.

    python -m benchmarks.gpu_train --dry_run      # tiny models on the CPU, 2 gloo ranks standing for 8
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import torch

ARCHS = ("bert", "modernbert")
HEADS = ("gathered", "full")
DRY_RUN_STANDS_FOR = 8  # --dry_run sizes its data for this many devices, and runs 2 gloo ranks


def measure(data: str, output: str, arch: str, head: str, size: str, steps: int, warmup: int, batch_size: int,
            workers: int, compile_: bool, precision: str = "auto") -> dict | None:
    """`steps` timed optimizer steps of `jobs.train` on this process's rank (after `warmup`); rank 0
    returns the figures (the others None)."""
    from pipeline.consumers.training.batches import TOKENS, targets_of
    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.loop import build_run, optimizer_step
    from pipeline.consumers.training.mfu import flops_per_token, peak_flops
    from pipeline.consumers.training.ranks import StopRequests, init_ranks

    ranks = init_ranks()
    finished = False
    try:
        device = ranks.device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        cfg = TrainConfig(data=data, output=output, arch=arch, config=size, batch_size=batch_size,
                          max_steps=warmup + steps, warmup_steps=warmup + 1, num_workers=workers, compile=compile_,
                          precision=precision, save_every=0, save_minutes=0, log_every=0, eval_rows=0)
        if ranks.is_main:
            os.makedirs(output, exist_ok=True)
        ranks.barrier()
        # the full head: the trainer's step with HF's loss (the projection at every position) swapped in
        run = build_run(cfg, ranks, StopRequests(announce=False), [], resuming=False,
                        **({"loss": _FullHead} if head == "full" else {}))
        batches = iter(run.loader)
        wait = compute = 0.0
        tokens = 0
        for step in range(warmup + steps):
            _sync(device)
            t0 = time.perf_counter()
            batch = next(batches)
            t1 = time.perf_counter()
            step_targets, step_tokens = ranks.sum([targets_of(batch), batch[TOKENS]])  # the step's control sum
            loss, _ = optimizer_step(run, [batch], step_targets)
            _sync(device)
            t2 = time.perf_counter()
            if step >= warmup:
                wait += t1 - t0
                compute += t2 - t1
                tokens += int(step_tokens)
        wait, compute = ranks.sum([wait, compute])
        elapsed = (wait + compute) / ranks.world_size  # the ranks ran side by side
        rate = tokens / elapsed
        peak = peak_flops(device)
        share = run.data.target_share if head == "gathered" else 1.0
        result = {
            "arch": arch, "size": size, "head": head, "devices": ranks.world_size, "seq_len": run.data.seq_len,
            "batch_size": batch_size, "steps": steps, "compile": compile_, "precision": run.precision.name,
            "attention": getattr(run.model.config, "_attn_implementation", None), "workers": run.workers,
            "train_rows": len(run.data.train), "tokens_per_s": rate,
            "mfu": rate * flops_per_token(run.model, run.data.seq_len, share) / (peak * ranks.world_size) if peak
            else None,
            "data_wait_share": wait / (wait + compute),
            "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "loss": float(loss.detach()) / max(step_targets / ranks.world_size, 1),
        }
        finished = True
        return result if ranks.is_main else None
    finally:
        ranks.close(together=finished)


class _FullHead(torch.nn.Module):
    """`model(**batch).loss`: the vocabulary projection at every position (what HF Trainer runs)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> torch.Tensor:
        from pipeline.consumers.training.batches import TARGETS_AT
        from schemas.shard import ATTENTION_MASK, INPUT_IDS, LABELS

        out = self.model(input_ids=batch[INPUT_IDS], attention_mask=batch[ATTENTION_MASK], labels=batch[LABELS])
        return out.loss * batch[TARGETS_AT].numel()  # summed, as the trainer's loss is (the count: no sync)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rows_needed(devices: int, batch_size: int, steps: int) -> int:
    """Train rows for `steps` steps of `batch_size` rows on each of `devices` ranks within one epoch
    (an epoch's end restarts the loader: a stall a long run does not have)."""
    return devices * batch_size * steps


def prepare_data(seq_len: int, rows: int, folder: str) -> str:
    """The package's sample books, preprocessed at `seq_len` with dynamic masks, repeated (as hard
    links under other names: no dedup by default) until the output holds at least `rows` rows."""
    from jobs.preprocess import run
    from pipeline.consumers.loading import MlmShardDataset
    from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER

    books = sorted(SAMPLE_BOOKS.glob("*.txt"))

    def preprocess(copies: int) -> str:
        inputs = os.path.join(folder, f"books-{copies}")
        os.makedirs(inputs, exist_ok=True)
        for copy in range(copies):
            for book in books:
                target = os.path.join(inputs, f"copy{copy:04d}__{book.name}")
                try:
                    os.link(book, target)
                except OSError:
                    shutil.copyfile(book, target)
        out = os.path.join(folder, f"sample-{seq_len}-x{copies}")
        run(["--input", inputs, "--output", out, "--tokenizer", str(SAMPLE_TOKENIZER), "--max_seq_length",
             str(seq_len), "--min_tokens", str(min(64, seq_len // 4)), "--masking", "dynamic",
             "--validation_fraction", "0"])
        return out

    once = preprocess(1)
    per_copy = len(MlmShardDataset(once))
    if per_copy >= rows:
        return once
    out = preprocess(math.ceil(rows / per_copy * 1.02))  # a little over: rows per book are not exactly additive
    if len(MlmShardDataset(out)) < rows:
        raise RuntimeError(f"benchmarks.gpu_train: the repeated sample holds {len(MlmShardDataset(out))} rows, "
                           f"{rows} needed")
    return out


def _launch(args: argparse.Namespace, data: str, arch: str, head: str, devices: int, out: str, run_dir: str) -> dict:
    """One configuration on `devices` ranks under torchrun; rank 0 writes its figures to `out`."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(devices),
               "-m", "benchmarks.gpu_train", "--worker", "--data", data, "--arch", arch, "--head", head,
               "--size", args.size, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--batch_size", str(args.batch_size), "--workers", str(args.workers), "--precision", args.precision,
               "--json", out, "--run_dir", run_dir]
    if args.compile:
        command.append("--compile")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, cwd=repo, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited {done.returncode}:\n{done.stderr[-3000:]}")
    with open(out) as handle:
        return json.load(handle)


def _line(r: dict) -> str:
    where = f"{r['arch']:10s} {r.get('size', ''):5s} {r['head']:8s} x{r['devices']}"
    if "error" in r:
        return f"{where}  FAILED: {r['error'].strip().splitlines()[-1] if r['error'].strip() else 'error'}"
    mfu = f"{r['mfu']:6.1%}" if r["mfu"] is not None else "   n/a"
    memory = f"{r['peak_memory_gb']:5.1f} GB" if r["peak_memory_gb"] is not None else "    n/a"
    return (f"{where}  {r['tokens_per_s']:12,.0f} tokens/s  MFU {mfu}  data wait {r['data_wait_share']:6.1%}  "
            f"peak memory {memory}  {r['precision']} {r['attention']}")


def _write(path: str | None, report: dict) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump(report, handle, indent=2)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="a jobs.preprocess output (default: the sample books at --seq_len, repeated "
                                       "to the rows the run needs)")
    parser.add_argument("--seq_len", type=int, default=512, help="row length of the sample data (default: 512)")
    parser.add_argument("--size", default="base", help="model size, tiny..base (default: base)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration (default: 30)")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps first (default: 8)")
    parser.add_argument("--batch_size", type=int, default=32, help="rows per GPU per step (default: 32)")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers per rank (default: 4)")
    parser.add_argument("--precision", default="auto", help="jobs.train's --precision (default: auto)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss (default: off)")
    parser.add_argument("--archs", default=",".join(ARCHS), help="families to measure (default: bert,modernbert)")
    parser.add_argument("--heads", default=",".join(HEADS), help="heads to measure (default: gathered,full)")
    parser.add_argument("--json", help="also write the figures to this file (after every configuration)")
    parser.add_argument("--dry_run", action="store_true",
                        help=f"tiny models on the CPU, 64 tokens, 2 steps; 2 gloo ranks stand for "
                             f"{DRY_RUN_STANDS_FOR} devices (the data is sized for {DRY_RUN_STANDS_FOR}): checks "
                             "the script")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one configuration, under torchrun
    parser.add_argument("--arch", help=argparse.SUPPRESS)
    parser.add_argument("--head", help=argparse.SUPPRESS)
    parser.add_argument("--run_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = measure(args.data, args.run_dir, args.arch, args.head, args.size, args.steps, args.warmup,
                         args.batch_size, args.workers, args.compile, args.precision)
        if result is not None:
            _write(args.json, result)
        # The figures are written and the process group is left: skip the interpreter's teardown, where
        # gloo's threads can still abort a worker under load ("terminate called without an active
        # exception", seen once in CI; pytorch/pytorch#179291 describes the teardown race).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    gpus = torch.cuda.device_count()
    report: dict = {"results": [], "gpus": gpus, "torch": torch.__version__}
    if args.dry_run:
        args.size, args.seq_len, args.steps, args.warmup, args.batch_size, args.workers = "tiny", 64, 2, 1, 4, 0
        device_counts, sized_for = [1, 2], DRY_RUN_STANDS_FOR  # two CPU ranks with gloo stand in for "all GPUs"
    elif not gpus:
        report["error"] = "benchmarks.gpu_train needs a CUDA device (or --dry_run)"
        _write(args.json, report)
        raise SystemExit(report["error"])
    else:
        device_counts, sized_for = ([1, gpus] if gpus > 1 else [1]), gpus
    results = report["results"]
    with tempfile.TemporaryDirectory(prefix="gpu-train-") as scratch:
        try:
            rows = rows_needed(sized_for, args.batch_size, args.warmup + args.steps)
            data = args.data or prepare_data(args.seq_len, rows, scratch)
        except Exception as error:  # noqa: BLE001 - the JSON says what failed, whatever it was
            report["error"] = f"preparing the data failed: {error!r}"
            _write(args.json, report)
            raise SystemExit(f"benchmarks.gpu_train: {report['error']}") from None
        report.update(data=data, rows_needed=rows, sized_for_devices=sized_for)
        print(f"data: {data} (sized for {sized_for} device(s): {rows} rows); {gpus} GPU(s); steps {args.steps} after "
              f"{args.warmup} warm-up, batch {args.batch_size} per device", flush=True)
        for devices in device_counts:
            for arch in args.archs.split(","):
                for head in args.heads.split(","):
                    run_dir = tempfile.mkdtemp(prefix=f"{arch}-{head}-x{devices}-", dir=scratch)
                    try:
                        if devices == 1:  # in this process: no launcher start-up
                            with contextlib.redirect_stdout(sys.stderr):
                                row = measure(data, run_dir, arch, head, args.size, args.steps, args.warmup,
                                              args.batch_size, args.workers, args.compile, args.precision)
                        else:
                            row = _launch(args, data, arch, head, devices, os.path.join(scratch, "rank0.json"),
                                          run_dir)
                    except Exception as error:  # noqa: BLE001 - a failed configuration is a row with its error
                        row = {"arch": arch, "size": args.size, "head": head, "devices": devices,
                               "error": f"{error!r}\n{traceback.format_exc(limit=-3)}"}
                    finally:
                        gc.collect()  # the last configuration's model and optimizer leave the GPU
                        if torch.cuda.is_available():
                            torch.cuda.empty_cache()
                        shutil.rmtree(run_dir, ignore_errors=True)
                    results.append(row)
                    _write(args.json, report)
                    print(_line(row), flush=True)
                    if args.dry_run and devices > 1:
                        break  # one multi-rank configuration proves the launcher path
                if args.dry_run and devices > 1:
                    break
    return results


if __name__ == "__main__":
    main()
