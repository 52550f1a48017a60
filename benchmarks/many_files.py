"""The preprocess job on many small inputs: the memory curve of its whole process tree.

    python -m benchmarks.many_files --files 20000 [50000 100000 ...] [--folder DIR] [--limit_gb 6]
        [--copies | --near_copies] [-- JOB OPTIONS]

Writes N files of 1-4 KB of distinct text (deterministic: file i is drawn from the embedded sample's
words with seed i; no two share a MinHash band, so near-duplicate detection finds nothing) under
`DIR/in/` in folders of 10,000, unless they are there already; then runs `jobs.preprocess` on the
folder (the local runner, its default workers) in a child process, sampling the summed RSS of the
launcher and every worker process it starts every `--every` seconds. The curve goes to `--csv`
(seconds, rss_mb, processes, anon_mb: RSS less file-backed pages, such as the memory-mapped part files
the shard writers read); the summary (files, input MB, wall, peak RSS and its per-input share)
is printed as one JSON line. A run whose tree passes `--limit_gb` is killed (the summary says so):
a runaway run must not take the machine with it. Made to go to 1,000,000 files (about 2.5 GB of
input and 1.5 GB of part files; the folder is reused by later runs).

`--copies`: every file holds the same text (under `DIR/in-copies/`), the hostile case for the end of
the job: the copies of one content share a content key, so one bucket task reads them all.
`--near_copies`: every file holds the same text after a first line of its own ("Variant N.", under
`DIR/in-near/`): no two are exact duplicates, and every two share most MinHash bands, so with
`--near_dedup` all but one are dropped as near duplicates of the first.

Several counts (`--files 20000 50000 100000`) run one after the other, each in `DIR/N/`, and the
last line is the curve: every run's peak and the least-squares slope (KB of peak RSS per input) and
intercept (MB) through them, from the runs that finished.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.procmon import anon_of, rss_of, tree_processes
from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER

FILES_PER_FOLDER = 10_000
MIN_BYTES, MAX_BYTES = 1024, 4096


def _words() -> list[str]:
    words: set[str] = set()
    for book in sorted(SAMPLE_BOOKS.glob("*.txt")):
        words.update(w.strip(".,;:!?\"'()[]").lower() for w in book.read_text(encoding="utf-8").split())
    return sorted(w for w in words if w.isalpha())


def file_text(index: int, words: list[str]) -> str:
    """File `index`'s text: 1-4 KB of words drawn with seed `index`, in sentences and paragraphs."""
    rng = np.random.default_rng(index)
    target = int(rng.integers(MIN_BYTES, MAX_BYTES + 1))
    out: list[str] = []
    size = 0
    while size < target:
        sentence = " ".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(6, 20))))
        sentence = sentence[0].upper() + sentence[1:] + "."
        out.append(sentence + ("\n\n" if rng.random() < 0.2 else " "))
        size += len(sentence) + 1
    return "".join(out).strip() + "\n"


def write_inputs(folder: Path, files: int, copies: bool = False, near: bool = False) -> int:
    """Files 0..files-1 under folder (in subfolders of FILES_PER_FOLDER); returns their total bytes.
    With `copies`, every file holds file 0's text (the hostile case: one content, one bucket); with
    `near`, file 0's text after a line of its own. A folder holding a different count is rewritten."""
    stamp = folder.with_name(folder.name + ".count")
    count = f"{files} copies" if copies else f"{files} near copies" if near else str(files)
    if stamp.is_file() and stamp.read_text() == count:
        return sum(p.stat().st_size for p in folder.rglob("*.txt"))
    shutil.rmtree(folder, ignore_errors=True)
    words = _words()
    total = 0
    for i in range(files):
        sub = folder / f"{i // FILES_PER_FOLDER:04d}"
        if i % FILES_PER_FOLDER == 0:
            sub.mkdir(parents=True)
        data = (f"Variant {i}.\n\n" if near else "").encode() + file_text(0 if copies or near else i, words).encode()
        (sub / f"doc{i:07d}.txt").write_bytes(data)
        total += len(data)
    stamp.write_text(count)
    return total


def run_sampled(argv: list[str], every: float, limit_bytes: int, log_path: Path) -> dict:
    """Run argv (in its own process group), sampling its tree's RSS; kill the group past limit_bytes."""
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        watched = psutil.Process(proc.pid)
        curve: list[tuple[float, float, int]] = []
        killed = False
        while proc.poll() is None:
            procs = tree_processes(watched)
            rss = rss_of(procs)
            curve.append((round(time.perf_counter() - started, 2), round(rss / 2**20, 1), len(procs),
                          round(anon_of(procs) / 2**20, 1)))
            if rss > limit_bytes:
                killed = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(every)
    return {"returncode": proc.returncode, "killed": killed, "wall_s": time.perf_counter() - started, "curve": curve}


def measure(files: int, folder: Path, every: float, limit_gb: float, job_args: list[str], keep_output: bool,
            csv_path: Path | None = None, copies: bool = False, near: bool = False) -> dict:
    """One run on `files` files under `folder`: its memory curve to CSV, its summary."""
    inputs, output = folder / ("in-copies" if copies else "in-near" if near else "in"), folder / "out"
    input_bytes = write_inputs(inputs, files, copies, near)
    shutil.rmtree(output, ignore_errors=True)
    job = [sys.executable, "-m", "jobs.preprocess", "--input", str(inputs), "--output", str(output),
           "--tokenizer", str(SAMPLE_TOKENIZER), "--max_seq_length", "128", "--progress_seconds", "30", *job_args]
    run = run_sampled(job, every, int(limit_gb * 2**30), folder / f"job-{files}.log")
    csv_path = csv_path or folder / f"memory-{files}.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["seconds", "rss_mb", "processes", "anon_mb"])
        writer.writerows(run["curve"])
    peak = max((mb for _, mb, _, _ in run["curve"]), default=0.0)
    peak_anon = max((mb for _, _, _, mb in run["curve"]), default=0.0)
    if not keep_output:
        shutil.rmtree(output, ignore_errors=True)
    return {"files": files, "input_mb": round(input_bytes / 1e6, 1), "wall_s": round(run["wall_s"], 1),
            "peak_rss_mb": peak, "peak_kb_per_input": round(peak * 1024 / max(files, 1), 2),
            "peak_anon_mb": peak_anon,
            "returncode": run["returncode"], "killed_past_gb": limit_gb if run["killed"] else None,
            "csv": str(csv_path), "log": str(folder / f"job-{files}.log")}


def memory_slope(runs: list[dict], key: str = "peak_rss_mb", prefix: str = "") -> dict:
    """Peak RSS (or another peak, `key`) against inputs over the finished runs: the least-squares
    line's slope (KB an input) and intercept (MB); None with fewer than two distinct counts."""
    done = [r for r in runs if r["returncode"] == 0 and not r["killed_past_gb"]]
    if len({r["files"] for r in done}) < 2:
        return {f"{prefix}slope_kb_per_input": None, f"{prefix}intercept_mb": None}
    slope, intercept = np.polyfit([r["files"] for r in done], [r[key] for r in done], 1)
    return {f"{prefix}slope_kb_per_input": round(float(slope) * 1024, 2),
            f"{prefix}intercept_mb": round(float(intercept), 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[20_000])
    parser.add_argument("--folder", help="where the inputs (in/) and the output (out/) go (default: a temp folder)")
    parser.add_argument("--csv", help="the memory curve of a single count (default: FOLDER/memory-N.csv)")
    parser.add_argument("--every", type=float, default=0.2, help="seconds between RSS samples")
    parser.add_argument("--limit_gb", type=float, default=6.0, help="kill the run past this tree RSS")
    parser.add_argument("--keep_output", action="store_true")
    parser.add_argument("--copies", action="store_true",
                        help="every file the same text (in FOLDER/in-copies): the copies of one content meet in one task")
    parser.add_argument("--near_copies", action="store_true",
                        help="every file the same text after a line of its own (in FOLDER/in-near): near duplicates")
    parser.add_argument("job_args", nargs="*", help="more jobs.preprocess options (after --)")
    args = parser.parse_args(argv)
    if args.copies and args.near_copies:
        parser.error("--copies and --near_copies are two corpora: choose one")
    folder = Path(args.folder or tempfile.mkdtemp(prefix="maskbeam-many-files-"))
    if len(args.files) == 1:
        summary = measure(args.files[0], folder, args.every, args.limit_gb, args.job_args, args.keep_output,
                          Path(args.csv) if args.csv else None, args.copies, args.near_copies)
        print(json.dumps(summary))
        return summary
    runs = []
    for files in args.files:
        runs.append(measure(files, folder / str(files), args.every, args.limit_gb, args.job_args, args.keep_output,
                            copies=args.copies, near=args.near_copies))
        print(json.dumps(runs[-1]), flush=True)
    curve = {"runs": [{k: r[k] for k in ("files", "peak_rss_mb", "peak_anon_mb", "wall_s", "returncode",
                                         "killed_past_gb")} for r in runs],
             **memory_slope(runs), **memory_slope(runs, "peak_anon_mb", "anon_")}
    print(json.dumps(curve))
    return curve


if __name__ == "__main__":
    main()
