"""GPU training benchmark: BERT-base at 512 tokens, bf16, fed by our loader with dynamic masking.

    python -m benchmarks.gpu_train --data DIR [--steps 60] [--batch_size 32] [--workers 4] [--compile]
        [--head gathered|full]

Reports tokens/s, MFU and the share of step time spent waiting for data (target: under 2%).
Needs a CUDA device; DIR is a `jobs.preprocess --masking dynamic` output at 512 tokens.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader

from pipeline.consumers.loader import MlmCollator, MlmShardDataset, ResumableSampler
from pipeline.consumers.training import (
    TrainConfig,
    autocast,
    build_model,
    flops_per_token,
    mlm_loss,
    peak_flops,
)
from schemas.shard import INPUT_IDS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--head", choices=("gathered", "full"), default="gathered",
                        help="gathered: the MLM head only at the targets (jobs.train); full: model(**batch).loss")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu_train needs a CUDA device")
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    dataset = MlmShardDataset(args.data)
    model = build_model(TrainConfig(data=args.data, output="", config="base"), dataset.vocab_size, dataset.seq_len,
                        0).to(device)
    def loss_of(batch: dict) -> torch.Tensor:
        return mlm_loss(model, batch) if args.head == "gathered" else model(**batch).loss

    step_loss = torch.compile(loss_of) if args.compile else loss_of
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=ResumableSampler(len(dataset), seed=0),
                        collate_fn=MlmCollator(), num_workers=args.workers, pin_memory=True, drop_last=True,
                        persistent_workers=args.workers > 0, prefetch_factor=4 if args.workers else None)
    iterator = iter(loader)
    wait = compute = 0.0
    tokens = 0
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            batch = next(iterator)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        t1 = time.perf_counter()
        with autocast(device):
            loss = step_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if step >= args.warmup:
            wait += t1 - t0
            compute += t2 - t1
            tokens += batch[INPUT_IDS].numel()
    rate = tokens / (wait + compute)
    peak = peak_flops(device)
    print(json.dumps({
        "device": torch.cuda.get_device_name(device), "batch_size": args.batch_size, "seq_len": dataset.seq_len,
        "tokens_per_s": rate, "mfu": rate * flops_per_token(model, dataset.seq_len) / peak if peak else None,
        "data_wait_share": wait / (wait + compute), "steps": args.steps, "compile": args.compile,
        "head": args.head,
    }))


if __name__ == "__main__":
    main()
