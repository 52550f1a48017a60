"""The first pass over text inputs (`UnitReader.scan`: read, clean, measure) and its kernels alone,
one thread, in CPU seconds (the machine may be shared: process time, not wall time).

    python -m benchmarks.first_pass --corpus DIR [--repeat 5] [--against OTHER_CHECKOUT]

Each figure is the median of `--repeat` passes over the corpus' `*.txt` files after one warm-up
pass, in a fresh process. With `--against`, the same is run alternately with another checkout's
code on PYTHONPATH (say, main before a change) and the old/new ratio of each median is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = ("scan", "signature", "scripts", "newlines")


def _passes(corpus: Path, workload: str, repeat: int) -> list[float]:
    """CPU seconds of `repeat` passes of one workload (after a warm-up pass), in this process."""
    paths = sorted(corpus.glob("*.txt"))
    if workload == "scan":
        from pipeline.beam.reading.reader import UnitReader
        from pipeline.beam.reading.work_units import WorkUnit

        units = [WorkUnit(source=str(p), format="text", size=p.stat().st_size) for p in paths]

        def one_pass() -> None:
            for unit in units:
                UnitReader(unit, "text", False).scan()
    else:
        from pipeline.kernels.text.quality import MinHasher, script_letter_counts

        datas = [p.read_bytes() for p in paths]

        def one_pass() -> None:
            for data in datas:
                if workload == "signature":
                    hasher = MinHasher(len(data), 0x4D696E48)
                    hasher.update(data)
                    hasher.signature()
                elif workload == "scripts":
                    script_letter_counts(data)
                else:
                    _newlines(data)

    one_pass()
    seconds = []
    for _ in range(repeat):
        start = time.process_time()
        one_pass()
        seconds.append(time.process_time() - start)
    return seconds


def _newlines(data: bytes) -> None:
    """CRLF and CR to LF, control bytes counted: as the checkout under test does it."""
    try:
        from pipeline.kernels.text.cleaning import normalize_newline_bytes
    except ImportError:  # a checkout from before the kernel: what it did instead
        normalized = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        normalized.translate(None, bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]))
        return
    normalize_newline_bytes(data)


def _in_process(tree: Path, corpus: Path, workload: str, repeat: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # -P: not benchmarks/ on the path (its tokenize.py)
    out = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--corpus", str(corpus), "--workload",
                          workload, "--repeat", str(repeat), "--json"], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", help="another checkout: its code is measured alternately with this one")
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).resolve()
    if args.workload:  # a child: one workload, its seconds as JSON
        print(json.dumps(_passes(corpus, args.workload, args.repeat)))
        return {}
    mb = sum(p.stat().st_size for p in corpus.glob("*.txt")) / 1e6
    here = Path(__file__).resolve().parent.parent
    report: dict = {"corpus_mb": mb}
    for workload in WORKLOADS:
        new, old = [], []
        for _ in range(args.repeat):  # one pass each, alternately, so both see the same load
            new += _in_process(here, corpus, workload, 1)
            if args.against:
                old += _in_process(Path(args.against).resolve(), corpus, workload, 1)
        row = {"new_s": statistics.median(new), "new_mb_s": mb / statistics.median(new)}
        if old:
            row.update(old_s=statistics.median(old), old_mb_s=mb / statistics.median(old),
                       old_over_new=statistics.median(old) / statistics.median(new))
        report[workload] = row
        print(f"{workload:10s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
