"""The C heap of a local run hands its free pages back while the run goes on (native_heap.py): on
many small files glibc kept a third of the job's memory as free memory inside its arenas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.beam.run.native_heap import ARENA_ENV, arena_cap, compact_native_heap, release_free_memory

# 8 threads each allocate 20,000 blocks of 1 KB (160 MB, malloc's: beyond pymalloc's 512 bytes)
# and keep one in 64: the rest is freed, but the kept blocks pin the arenas' tops.
CHURN = textwrap.dedent("""
    import json, sys, threading, time
    import psutil
    from pipeline.beam.run.native_heap import compact_native_heap

    kept = []
    def churn():
        blocks = [bytearray(1024) for _ in range(20000)]
        kept.extend(blocks[::64])

    def run():
        threads = [threading.Thread(target=churn) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    process = psutil.Process()
    start = process.memory_info().rss
    if sys.argv[1] == "compact":
        with compact_native_heap(trim_seconds=0.05):
            run()
            peak = process.memory_info().rss
            time.sleep(0.5)  # the trimming thread's turn
            end = process.memory_info().rss
    else:
        run()
        peak = process.memory_info().rss
        time.sleep(0.5)
        end = process.memory_info().rss
    print(json.dumps({"start": start, "peak": peak, "end": end}))
""")
FREED = 8 * 20_000 * 1024 * 63 // 64


def _churned(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, timeout=120)
    return json.loads(out.stdout)


needs_glibc = pytest.mark.skipif(not release_free_memory(), reason="not glibc: the heap is left as it is")


@needs_glibc
def test_a_run_inside_compact_native_heap_hands_freed_memory_back():
    """Of the 157 MB the threads free, glibc alone keeps a good part in the process (how much depends on
    its trim heuristics and the machine's load: 67-85 MB seen); inside compact_native_heap most goes back."""
    plain, compact = _churned("plain"), _churned("compact")
    kept_plain, kept_compact = plain["end"] - plain["start"], compact["end"] - compact["start"]
    assert kept_plain > FREED * 0.25, plain  # the control: without the trim the memory stays
    assert kept_compact < FREED * 0.25 and kept_compact < kept_plain / 2, (compact, plain)


@needs_glibc
def test_worker_processes_started_inside_inherit_the_arena_cap(monkeypatch):
    monkeypatch.delenv(ARENA_ENV, raising=False)
    with compact_native_heap(trim_seconds=60):
        assert os.environ[ARENA_ENV] == str(arena_cap())
    assert ARENA_ENV not in os.environ
    monkeypatch.setenv(ARENA_ENV, "1")  # the user's own setting is kept
    with compact_native_heap(trim_seconds=60):
        assert os.environ[ARENA_ENV] == "1"
    assert os.environ[ARENA_ENV] == "1"
