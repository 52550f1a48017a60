"""Loader throughput: 256 x 512 batches per second with dynamic masking, 1 and 4 DataLoader workers.

    python -m benchmarks.loader --data DIR [--batches 200]

DIR is a `jobs.preprocess --masking dynamic` output. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader

from pipeline.loader import MlmCollator, MlmShardDataset, ResumableSampler


def batches_per_second(data: str, workers: int, n_batches: int, batch_size: int = 256, repeat: int = 3) -> list[float]:
    dataset = MlmShardDataset(data)
    sampler = ResumableSampler(len(dataset), seed=0)
    rates = []
    for attempt in range(repeat):
        sampler.set_epoch(attempt)
        dataset.set_epoch(attempt)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                            collate_fn=MlmCollator(), persistent_workers=False, prefetch_factor=4 if workers else None)
        iterator = iter(loader)
        next(iterator)  # burn-in: worker start-up and first memory maps
        start, seen = time.perf_counter(), 0
        while seen < n_batches:
            try:
                next(iterator)
            except StopIteration:
                sampler.set_epoch(sampler.epoch + 1)
                iterator = iter(loader)
                continue
            seen += 1
        rates.append(seen / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = {}
    for workers in (1, 4):
        rates = batches_per_second(args.data, workers, args.batches)
        result[f"workers_{workers}"] = {"median_batches_per_s": statistics.median(rates), "runs": rates}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
