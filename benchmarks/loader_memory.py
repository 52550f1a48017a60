"""Memory of DataLoader workers reading a large output: a whole epoch of 256-row batches through
`ResumableLoader` with W persistent workers, sampling each worker's memory as it goes, for each
way of reading rows (`--read_modes pread,mmap`, one after the other in one run).

    python -m benchmarks.loader_memory --data DIR [--workers 4] [--batches N] [--read_modes pread,mmap]

Reports per worker: RSS, USS (private: what the worker alone holds) and PSS (shared pages split
between the processes mapping them), at start and at their peak, and the output's size. With
`mmap` the pages of the output a worker touched count in its RSS although they are the page cache,
shared by every worker and rank; with `pread` (the default) no page of a shard is mapped into a
worker, so its RSS grows only by what it holds itself.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import psutil

from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableLoader, ResumableSampler

MB = 1024 * 1024


def _sample(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"rss": info.rss / MB, "uss": info.uss / MB, "pss": getattr(info, "pss", 0) / MB}


def measure(data: str, workers: int, batches: int, read_mode: str) -> dict:
    """One epoch (or `batches`) through W persistent workers; per-worker memory at start and peak."""
    dataset = MlmShardDataset(data, read_mode=read_mode)
    output_mb = sum(os.path.getsize(p) for p in dataset.paths) / MB
    sampler = ResumableSampler(len(dataset), seed=0, tag_epoch=True)
    loader = ResumableLoader(dataset, sampler=sampler, batch_size=256, num_workers=workers,
                             persistent_workers=True, collate_fn=MlmCollator(compact=True), prefetch_factor=4)
    me = psutil.Process()
    iterator = iter(loader)
    next(iterator)
    pids = [child.pid for child in me.children()]
    start = {pid: _sample(pid) for pid in pids}
    peak = {pid: dict(values) for pid, values in start.items()}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            for pid in pids:
                try:
                    for key, value in _sample(pid).items():
                        peak[pid][key] = max(peak[pid][key], value)
                except psutil.NoSuchProcess:
                    pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    total = batches or len(dataset) // 256
    began = time.perf_counter()
    n = 1
    for _ in iterator:
        n += 1
        if n >= total:
            break
    seconds = time.perf_counter() - began
    stop.set()
    watcher.join()
    for pid in pids:  # a last look
        for key, value in _sample(pid).items():
            peak[pid][key] = max(peak[pid][key], value)
    del iterator, loader  # the persistent workers end
    result = {
        "read_mode": read_mode, "output_mb": output_mb, "rows": len(dataset), "batches": n, "workers": workers,
        "batches_per_s": n / seconds,
        "per_worker": [{"start": start[pid], "peak": peak[pid],
                        "added": {k: peak[pid][k] - start[pid][k] for k in peak[pid]}} for pid in pids],
    }
    added_uss = [w["added"]["uss"] for w in result["per_worker"]]
    added_rss = [w["added"]["rss"] for w in result["per_worker"]]
    print(f"[{read_mode}] {output_mb:,.0f} MB output, {len(dataset):,} rows, {n} batches of 256 with {workers} "
          f"workers ({result['batches_per_s']:.0f} batches/s)")
    print(f"[{read_mode}] added per worker, MB: RSS " + ", ".join(f"{x:.0f}" for x in added_rss)
          + "; USS (private) " + ", ".join(f"{x:.0f}" for x in added_uss))
    print(f"[{read_mode}] peak per worker, MB: PSS " + ", ".join(f"{w['peak']['pss']:.0f}" for w in result["per_worker"]),
          flush=True)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batches", type=int, default=0, help="0: one whole epoch")
    parser.add_argument("--read_modes", default="pread,mmap", help="comma-separated: pread, mmap")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    result = {mode: measure(args.data, args.workers, args.batches, mode) for mode in args.read_modes.split(",")}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
