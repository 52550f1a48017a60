"""Run a command and measure its wall time and the peak RSS of its whole process tree."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

import psutil

SAMPLE_SECONDS = 0.05


@dataclass(frozen=True)
class Measured:
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str = ""


def tree_processes(process: psutil.Process) -> list[psutil.Process]:
    """`process` and all its descendants ([] once it is gone)."""
    try:
        return [process] + process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def rss_of(procs: list[psutil.Process]) -> int:
    """The summed RSS of `procs` (those gone meanwhile count 0)."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def anon_of(procs: list[psutil.Process]) -> int:
    """The summed anonymous resident memory of `procs`: RSS less its file-backed and shared pages
    (psutil's `shared`, Linux's RssFile + RssShmem). Memory-mapped part files read by the shard
    writers are file-backed pages the kernel can drop at any time; the heap is not."""
    total = 0
    for proc in procs:
        try:
            info = proc.memory_info()
        except psutil.NoSuchProcess:
            continue
        total += info.rss - getattr(info, "shared", 0)
    return total


def _tree_rss(process: psutil.Process) -> int:
    return rss_of(tree_processes(process))


def run_measured(argv: list[str], env: dict | None = None, cwd: str | None = None) -> Measured:
    """Run argv to completion, sampling the tree's summed RSS every 50 ms.

    Raises:
        RuntimeError: with the command's stderr tail when it exits non-zero.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True)
    watcher = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(watcher))
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - start
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {proc.returncode}:\n{stderr[-3000:]}")
    return Measured(wall_s=wall, peak_rss_mb=peak / 2**20, stdout=stdout, stderr=stderr)
