"""Loader throughput: 256 x 512 batches per second with dynamic masking, 1 and 4 DataLoader workers,
for each way of reading rows from the shards (`--read_modes pread,mmap`: both in one run, interleaved,
with the ratio pread / mmap).

    python -m benchmarks.loader --data DIR [--batches 200] [--read_modes pread,mmap]

DIR is a `jobs.preprocess --masking dynamic` output. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader

from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableLoader, ResumableSampler
from pipeline.storage.shard_rows import DEFAULT_READ_MODE


def batches_per_second(data: str, workers: int, n_batches: int, batch_size: int = 256, repeat: int = 3,
                       compact: bool = False, read_mode: str = DEFAULT_READ_MODE) -> list[float]:
    """Persistent workers, the epoch travelling with the indices; epochs roll over inside a timing.
    `compact`: workers ship int16/int8 batches and ResumableLoader widens them to int64 in the main
    process (what jobs.train does); else the collator builds int64 in the workers."""
    dataset = MlmShardDataset(data, read_mode=read_mode)
    sampler = ResumableSampler(len(dataset), seed=0, tag_epoch=True)
    loader_class = ResumableLoader if compact else DataLoader
    loader = loader_class(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers, drop_last=True,
                          collate_fn=MlmCollator(compact=compact), persistent_workers=workers > 0,
                          prefetch_factor=4 if workers else None)

    def batches():
        while True:
            yield from loader
            sampler.set_epoch(sampler.epoch + 1)

    stream = batches()
    next(stream)  # burn-in: worker start-up and first memory maps
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(n_batches):
            next(stream)
        rates.append(n_batches / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--read_modes", default="pread,mmap", help="comma-separated: pread, mmap")
    args = parser.parse_args()
    modes = args.read_modes.split(",")
    torch.set_num_threads(1)
    result = {}
    for compact in (False, True):
        for workers in (1, 4):
            for mode in modes:
                rates = batches_per_second(args.data, workers, args.batches, compact=compact, read_mode=mode)
                name = f"{'compact_' if compact else 'int64_'}workers_{workers}_{mode}"
                result[name] = {"median_batches_per_s": statistics.median(rates), "runs": rates}
                print(name, f"{statistics.median(rates):.0f} batches/s", flush=True)
            if len(modes) > 1:
                first, *others = (result[f"{'compact_' if compact else 'int64_'}workers_{workers}_{mode}"]
                                  ["median_batches_per_s"] for mode in modes)
                for mode, other in zip(modes[1:], others):
                    print(f"  ratio {modes[0]} / {mode}: {first / other:.2f}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
