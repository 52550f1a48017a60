"""Per-input time of `jobs.preprocess` on many small files, two checkouts side by side.

    python -m benchmarks.many_files_ab --before /path/to/other/checkout --files 10000 [50000] [--repeat 3]
        [--folder DIR] [--json FILE]

The inputs are `benchmarks.many_files`' (N files of 1-4 KB of distinct text, made once under
`DIR/N/in`). For each count, `--repeat` rounds, each running the job of the other checkout, then
this one (interleaved: a loaded machine weighs on both alike), each into a fresh `DIR/N/out`: wall
seconds and the CPU seconds of its whole process tree (`RUSAGE_CHILDREN`, less sensitive to load).
Prints one JSON line a count: the medians, milliseconds an input (wall and CPU) and after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.many_files import write_inputs
from pipeline.sample import SAMPLE_TOKENIZER

HERE = Path(__file__).resolve().parents[1]


def run_job(tree: Path, inputs: Path, output: Path, job_args: list[str]) -> dict:
    """One run of `tree`'s job: wall and tree CPU seconds, its exit status."""
    shutil.rmtree(output, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(output.parent / f"numba-{tree.name}"))
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(inputs), "--output", str(output),
            "--tokenizer", str(SAMPLE_TOKENIZER), "--max_seq_length", "128", "--progress_seconds", "600", *job_args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "returncode": proc.returncode,
            "error": proc.stderr[-2000:] if proc.returncode else ""}


def compare(files: int, folder: Path, before: Path, after: Path, repeat: int, job_args: list[str]) -> dict:
    inputs = folder / str(files) / "in"
    write_inputs(inputs, files)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(repeat):
        for name, tree in (("before", before), ("after", after)):
            runs[name].append(run_job(tree, inputs, folder / str(files) / "out", job_args))
    out: dict = {"files": files, "load_1min": round(os.getloadavg()[0], 1)}
    for name, mine in runs.items():
        ok = [r for r in mine if r["returncode"] == 0]
        out[name] = {"wall_s": [r["wall_s"] for r in mine], "cpu_s": [r["cpu_s"] for r in mine],
                     "failed": [r["error"] for r in mine if r["returncode"]]}
        if ok:
            wall, cpu = statistics.median(r["wall_s"] for r in ok), statistics.median(r["cpu_s"] for r in ok)
            out[name].update(median_wall_s=wall, median_cpu_s=cpu, wall_ms_per_input=round(1000 * wall / files, 3),
                             cpu_ms_per_input=round(1000 * cpu / files, 3))
    if "median_wall_s" in out["before"] and "median_wall_s" in out["after"]:
        out["after_over_before"] = {k: round(out["after"][f"median_{k}"] / out["before"][f"median_{k}"], 3)
                                    for k in ("wall_s", "cpu_s")}
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the other checkout (its jobs.preprocess runs first)")
    parser.add_argument("--after", default=str(HERE), help="this checkout (default)")
    parser.add_argument("--files", type=int, nargs="+", default=[10_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--folder", help="inputs and outputs (default: a temp folder)")
    parser.add_argument("--json", help="all counts' lines as one JSON list")
    parser.add_argument("job_args", nargs="*", help="more jobs.preprocess options (after --)")
    args = parser.parse_args(argv)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="maskbeam-many-files-ab-"))
    results = []
    for files in args.files:
        results.append(compare(files, folder, Path(args.before).resolve(), Path(args.after).resolve(), args.repeat,
                               args.job_args))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
