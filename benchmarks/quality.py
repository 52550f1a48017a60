"""The cost of the quality gates: the job end to end with `--near_dedup 0.8` against without, on the
same corpus, interleaved runs, plus the job's own account of its quality stage (script mix and
MinHash signatures, which every run computes: near-duplicate pairs are always reported).

    python -m benchmarks.quality --corpus DIR --tokenizer DIR [--scale 10] [--repeat 3]

Prints one JSON line: wall seconds per mode (median, min, max), the ratio, and the quality stage's
share of the worker seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus import corpus_bytes, scaled_corpus
from benchmarks.procmon import run_measured
from benchmarks.run import _stages

MODES = {"near_dedup off": [], "near_dedup 0.8": ["--near_dedup", "0.8"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="maskbeam-quality-"))
    corpus = scaled_corpus(Path(args.corpus), args.scale, work / "corpus")
    n_bytes = corpus_bytes(corpus)
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    quality_share: list[float] = []
    for _ in range(args.repeat):
        for mode, extra in MODES.items():
            out = work / "out"
            shutil.rmtree(out, ignore_errors=True)
            measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", str(corpus), "--output",
                                     str(out), "--tokenizer", args.tokenizer, *extra])
            walls[mode].append(measured.wall_s)
            stages = _stages(measured.stderr)
            worker = sum(v for k, v in stages.items() if k != "pipeline_wall_s")
            if worker:
                quality_share.append(stages.get("quality", 0.0) / worker)
    shutil.rmtree(work, ignore_errors=True)
    summary = {mode: (statistics.median(w), min(w), max(w)) for mode, w in walls.items()}
    report = {"corpus_mb": n_bytes / 1e6, "wall_s": summary,
              "near_dedup_on_vs_off": summary["near_dedup 0.8"][0] / summary["near_dedup off"][0],
              "quality_stage_share_of_worker_seconds": statistics.median(quality_share) if quality_share else None}
    for mode, (median, low, high) in summary.items():
        print(f"{mode:16s} {median:7.2f} s ({low:.2f}-{high:.2f})")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
