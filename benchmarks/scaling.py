"""Scaling on this machine: our job on the local runner (its default: one in-process worker up to
`ONE_WORKER_BYTES` with the fast backend, else one worker per core) and with two worker threads, vs
Beam's DaskRunner with 1, 2 and 4 Dask worker processes (a local cluster started for each run,
start-up included).

    python -m benchmarks.scaling --corpus DIR --tokenizer PATH [--repeat N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus import corpus_bytes
from benchmarks.procmon import run_measured

LOCAL = "local FnApiRunner, the job's default"


def _run(corpus: str, tokenizer: str, out: Path, extra: list[str]) -> float:
    shutil.rmtree(out, ignore_errors=True)
    measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", corpus, "--output", str(out),
                             "--tokenizer", tokenizer, *extra])
    shutil.rmtree(out, ignore_errors=True)
    return measured.wall_s


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    mb = corpus_bytes(Path(args.corpus)) / 1e6
    flags = {LOCAL: [],
             "local FnApiRunner, 2 worker threads": ["--direct_num_workers", "2", "--direct_running_mode",
                                                     "multi_threading"],
             **{f"DaskRunner, {n} worker process(es)": ["--dask_local_workers", str(n)] for n in (1, 2, 4)}}
    walls: dict[str, list[float]] = {name: [] for name in flags}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeat):  # interleaved so machine noise hits every setting alike
            for name, extra in flags.items():
                walls[name].append(_run(args.corpus, args.tokenizer, Path(scratch) / "out", extra))
    local = statistics.median(walls[LOCAL])
    report = {name: {"wall_s": statistics.median(w), "runs": w, "mb_per_s": mb / statistics.median(w),
                     "vs_local": statistics.median(w) / local} for name, w in walls.items()}
    for name, row in report.items():
        print(f"{name:36} {row['wall_s']:7.1f} s  {row['mb_per_s']:5.2f} MB/s  {row['vs_local']:.2f}x local wall")
    if args.json:
        Path(args.json).write_text(json.dumps({"corpus_mb": mb, "results": report}, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
