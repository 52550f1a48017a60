"""GPU training benchmark: BERT-base and ModernBERT-base at 512 tokens, bf16, fed by our loader with
dynamic masking, gathered vs full MLM head, on 1 GPU and (when there are more) on all of them.

From a fresh clone on a GPU machine (one command after the install; about 3-4 minutes on one GPU):

    pip install -e '.[train]' && python -m benchmarks.gpu_train [--json results.json]

It preprocesses the package's sample books at 512 tokens (bert-base-uncased, dynamic masks) into a
temporary folder, unless `--data DIR` names an output already made, then trains each configuration
with the trainer's own parts (models, gathered head, DDP under torchrun, ResumableLoader) and prints
one line per configuration: tokens/s (real tokens, all GPUs), MFU (FLOPs done / bf16 peak of the
GPUs), the share of step time spent waiting for data, and peak GPU memory. ModernBERT-base keeps its
published shape (22 layers, GLU 1152) with the data's vocabulary.

    python -m benchmarks.gpu_train --dry_run      # tiny models on the CPU, a few steps: checks the script
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

ARCHS = ("bert", "modernbert")
HEADS = ("gathered", "full")


def measure(data: str, arch: str, head: str, size: str, steps: int, warmup: int, batch_size: int,
            workers: int, compile_: bool) -> dict | None:
    """Train `steps` timed steps on this process's rank; rank 0 returns the figures (others None)."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    from pipeline.consumers.loading import MlmCollator, MlmShardDataset, widen
    from pipeline.consumers.outputs import tokenizer_spec
    from pipeline.consumers.training.helpers import autocast, flops_per_token, peak_flops
    from pipeline.consumers.training.loop import MaskedLMLoss
    from pipeline.consumers.training.models import build_model
    from pipeline.consumers.training.ranks import init_ranks
    from schemas.shard import ATTENTION_MASK

    ranks = init_ranks()
    device = ranks.device
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats(device)
    dataset = MlmShardDataset(data)
    model = build_model(tokenizer_spec(data), dataset.seq_len, device, arch=arch, size=size).to(device)
    module = MaskedLMLoss(model) if head == "gathered" else _FullHead(model)
    if ranks.distributed:
        module = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    step_loss = torch.compile(module, dynamic=head == "gathered") if compile_ else module
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    loader = DataLoader(dataset, batch_size=batch_size, sampler=_Cycle(len(dataset), batch_size, ranks.rank,
                                                                      ranks.world_size),
                        collate_fn=MlmCollator(compact=True), num_workers=workers, pin_memory=device.type == "cuda",
                        prefetch_factor=4 if workers else None)
    iterator = iter(loader)
    wait = compute = 0.0
    tokens = 0
    for step in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        batch = next(iterator)
        real_tokens = int(batch[ATTENTION_MASK].sum())
        batch = widen({k: v.to(device, non_blocking=True) for k, v in batch.items()})
        t1 = time.perf_counter()
        with autocast(device):
            loss = step_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        t2 = time.perf_counter()
        if step >= warmup:
            wait += t1 - t0
            compute += t2 - t1
            tokens += real_tokens
    wait, compute, tokens = ranks.sum([wait, compute, tokens])
    elapsed = (wait + compute) / ranks.world_size  # the ranks ran side by side
    rate = tokens / elapsed
    peak = peak_flops(device)
    share = float(dataset.rule.mlm_probability) if head == "gathered" else 1.0
    result = {
        "arch": arch, "size": size, "head": head, "devices": ranks.world_size, "seq_len": dataset.seq_len,
        "batch_size": batch_size, "steps": steps, "compile": compile_, "tokens_per_s": rate,
        "mfu": rate * flops_per_token(model, dataset.seq_len, share) / (peak * ranks.world_size) if peak else None,
        "data_wait_share": wait / (wait + compute),
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "loss": float(loss.detach()),
    }
    ranks.close()
    return result if ranks.is_main else None


class _Cycle(torch.utils.data.Sampler):
    """Epoch after epoch of this rank's share of a seeded permutation, whole batches only, as the
    dataset's epoch-tagged indices (epoch * n + row): one iterator for the whole measurement, so a
    small output never makes the loader drain and restart at epoch ends (a stall a long run does not have)."""

    def __init__(self, n: int, batch_size: int, rank: int, world_size: int) -> None:
        self.n, self.batch_size, self.rank, self.world_size = n, batch_size, rank, world_size
        if n // world_size < batch_size:
            raise SystemExit(f"benchmarks.gpu_train: {n} rows cannot give {world_size} devices a batch of "
                             f"{batch_size} each: pass --data with a larger output or a smaller --batch_size")

    def __iter__(self):
        import numpy as np

        for epoch in range(1_000_000):
            mine = np.random.default_rng([0, epoch]).permutation(self.n)[self.rank:: self.world_size]
            keep = len(mine) // self.batch_size * self.batch_size
            yield from (mine[:keep] + epoch * self.n).tolist()

    def __len__(self) -> int:
        return 1_000_000 * (self.n // self.world_size // self.batch_size * self.batch_size)


class _FullHead(torch.nn.Module):
    """`model(**batch).loss`: the vocabulary projection at every position (what HF Trainer runs)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> torch.Tensor:
        return self.model(**batch).loss


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prepare_data(seq_len: int, books: int, folder: str) -> str:
    """The package's sample books, preprocessed at `seq_len` with dynamic masks."""
    from jobs.preprocess import run
    from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER

    inputs = sorted(SAMPLE_BOOKS.glob("*.txt"))[:books]
    out = os.path.join(folder, f"sample-{seq_len}")
    argv = [a for path in inputs for a in ("--input", str(path))]
    run([*argv, "--output", out, "--tokenizer", str(SAMPLE_TOKENIZER), "--max_seq_length", str(seq_len),
         "--min_tokens", str(min(64, seq_len // 4)), "--masking", "dynamic", "--validation_fraction", "0"])
    return out


def _launch(args: argparse.Namespace, data: str, arch: str, head: str, devices: int, out: str) -> dict:
    """One configuration on `devices` ranks under torchrun; rank 0 writes its figures to `out`."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(devices),
               "-m", "benchmarks.gpu_train", "--worker", "--data", data, "--arch", arch, "--head", head,
               "--size", args.size, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--batch_size", str(args.batch_size), "--workers", str(args.workers), "--json", out]
    if args.compile:
        command.append("--compile")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, cwd=repo, env=env)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.gpu_train: {arch}/{head} on {devices} devices failed:\n{done.stderr[-3000:]}")
    with open(out) as handle:
        return json.load(handle)


def _line(r: dict) -> str:
    mfu = f"{r['mfu']:6.1%}" if r["mfu"] is not None else "   n/a"
    memory = f"{r['peak_memory_gb']:5.1f} GB" if r["peak_memory_gb"] is not None else "    n/a"
    return (f"{r['arch']:10s} {r['size']:5s} {r['head']:8s} x{r['devices']}  {r['tokens_per_s']:12,.0f} tokens/s  "
            f"MFU {mfu}  data wait {r['data_wait_share']:6.1%}  peak memory {memory}")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="a jobs.preprocess output (default: the sample books at --seq_len)")
    parser.add_argument("--seq_len", type=int, default=512, help="row length of the sample data (default: 512)")
    parser.add_argument("--size", default="base", help="model size, tiny..base (default: base)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration (default: 30)")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps first (default: 8)")
    parser.add_argument("--batch_size", type=int, default=32, help="rows per GPU per step (default: 32)")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers per rank (default: 4)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss (default: off)")
    parser.add_argument("--archs", default=",".join(ARCHS), help="families to measure (default: bert,modernbert)")
    parser.add_argument("--heads", default=",".join(HEADS), help="heads to measure (default: gathered,full)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--dry_run", action="store_true",
                        help="tiny models on the CPU, 64 tokens, 2 steps, 2 ranks with gloo: checks the script")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one configuration, under torchrun
    parser.add_argument("--arch", help=argparse.SUPPRESS)
    parser.add_argument("--head", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = measure(args.data, args.arch, args.head, args.size, args.steps, args.warmup, args.batch_size,
                         args.workers, args.compile)
        if result is not None:
            with open(args.json, "w") as handle:
                json.dump(result, handle)
        # The figures are written and the process group is left: skip the interpreter's teardown, where
        # gloo's threads can still abort a worker under load ("terminate called without an active
        # exception", seen once in CI; pytorch/pytorch#179291 describes the teardown race).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    gpus = torch.cuda.device_count()
    if args.dry_run:
        args.size, args.seq_len, args.steps, args.warmup, args.batch_size, args.workers = "tiny", 64, 2, 1, 4, 0
        device_counts = [1, 2]  # two CPU ranks with gloo stand in for "all GPUs"
    elif not gpus:
        raise SystemExit("benchmarks.gpu_train needs a CUDA device (or --dry_run)")
    else:
        device_counts = [1, gpus] if gpus > 1 else [1]
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-train-") as scratch:
        data = args.data or _prepare_data(args.seq_len, 1 if args.dry_run else 3, scratch)
        print(f"data: {data}; {gpus} GPU(s); steps {args.steps} after {args.warmup} warm-up, batch {args.batch_size} "
              "per device", flush=True)
        for devices in device_counts:
            for arch in args.archs.split(","):
                for head in args.heads.split(","):
                    if devices == 1:  # in this process: no launcher start-up
                        with contextlib.redirect_stdout(sys.stderr):
                            row = measure(data, arch, head, args.size, args.steps, args.warmup, args.batch_size,
                                          args.workers, args.compile)
                        gc.collect()  # the last configuration's model and optimizer leave the GPU
                        if torch.cuda.is_available():
                            torch.cuda.empty_cache()
                    else:
                        row = _launch(args, data, arch, head, devices, os.path.join(scratch, "rank0.json"))
                    results.append(row)
                    print(_line(row), flush=True)
                    if args.dry_run and devices > 1:
                        break  # one multi-rank configuration proves the launcher path
                if args.dry_run and devices > 1:
                    break
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"results": results}, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
