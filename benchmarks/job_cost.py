"""The job's fixed and per-byte cost per tokenizer family: `time = fixed + bytes / rate`, fitted from
runs of `jobs.preprocess` on several sizes of distinct generated text.

    python -m benchmarks.job_cost [--sizes 5,15,45] [--repeat 2] [--tokenizer PATH ...] [--corpus DIR]
        [--books ../shared/corpus/books] [--seed 0] [--limit] [--job_args="FLAGS"] [--json FILE] [--markdown FILE]

One corpus of the largest size comes from `benchmarks.generate_corpus` (or `--corpus`, a folder of
distinct text); each smaller size is its first files (hard links), so no run reads any text twice.
For each tokenizer, interleaved over sizes and `--repeat` rounds: `jobs.preprocess
--tokenizer_backend fast` end to end (interpreter, imports, Beam, read, clean, quality, tokenize,
chunk, mask, write), timed by the wall clock and by the CPU seconds of its whole process tree
(`RUSAGE_CHILDREN`: less sensitive to a loaded machine), after one untimed run on one file (a
checkout's first run of a family compiles its kernels, and writes the bytecode of every module the job
imports: the runs get `PYTHONPYCACHEPREFIX` in the scratch folder and never `PYTHONDONTWRITEBYTECODE`,
which would compile ~130 modules from source in every run, ~0.5 CPU-s an installed package never
pays). A least-squares line through the medians
per size gives `fixed` (s, the intercept) and `rate` (MB/s, one over the slope), for both clocks.
The job's default runner is one in-process worker up to `ONE_WORKER_BYTES` (16 MiB) and a worker
thread per core above, so the default sizes straddle it: `--sizes 0.1,1,4` fits the small-job mode
alone, and `--job_args="--direct_num_workers 2 --direct_running_mode multi_threading"` (flags added to
every run) the two-thread mode at any size.
`--limit` adds the bare `tokenizers.encode_batch` on all cores over the largest corpus' paragraphs
(the encode loop alone timed) and the job's throughput at that size against it; and the same by CPU
seconds (the bare run's whole process against the job's tree: what a loaded machine still compares).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.corpus import corpus_bytes, corpus_files
from benchmarks.procmon import run_measured
from benchmarks.run import _step_limit

TEST_TOKENIZERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
SHARED_BERT = Path(__file__).resolve().parent.parent.parent / "shared" / "tokenizers" / "bert-base-uncased"
DEFAULT_TOKENIZERS = (str(SHARED_BERT), str(TEST_TOKENIZERS / "roberta.json"), str(TEST_TOKENIZERS / "xlmr_unigram"))


def fit_line(sizes_mb: list[float], seconds: list[float]) -> tuple[float, float]:
    """(fixed s, rate MB/s) of `seconds = fixed + mb / rate` by least squares.

    Raises:
        ValueError: fewer than two distinct sizes, or times that do not grow with the size.
    """
    if len(set(sizes_mb)) < 2:
        raise ValueError(f"the fit needs at least two distinct sizes, got {sorted(set(sizes_mb))} MB")
    slope, intercept = np.polyfit(np.asarray(sizes_mb, float), np.asarray(seconds, float), 1)
    if slope <= 0:
        raise ValueError(f"times {seconds} do not grow with sizes {sizes_mb} MB: too noisy to fit; use larger "
                         "sizes or more --repeat")
    return float(intercept), float(1 / slope)


def nested_corpora(source: Path, sizes_mb: list[float], target: Path) -> list[Path]:
    """For each size, a folder of hard links to `source`'s first files adding up to at least that size.

    Raises:
        ValueError: `source` holds less text than the largest size.
    """
    files = corpus_files(source)
    total = sum(p.stat().st_size for p in files)
    if total < max(sizes_mb) * 1e6 * 0.98:
        raise ValueError(f"{source} holds {total / 1e6:.1f} MB, less than the largest size {max(sizes_mb)} MB")
    folders = []
    for mb in sizes_mb:
        folder = target / f"{mb:g}MB"
        folder.mkdir(parents=True, exist_ok=True)
        size = 0
        for path in files:
            if size >= mb * 1e6 * 0.98:
                break
            try:
                os.link(path, folder / path.name)
            except OSError:
                shutil.copyfile(path, folder / path.name)
            size += path.stat().st_size
        folders.append(folder)
    return folders


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def job_environment(bytecode: Path) -> dict[str, str]:
    """The environment of the timed runs: this one, with bytecode written to and read from `bytecode`
    (as an installed package's is) rather than compiled from source in every process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


def run_job(corpus: Path, tokenizer: str, out: Path, job_args: tuple[str, ...] = ()) -> dict:
    """One `jobs.preprocess` run: wall s, CPU s of its process tree, peak RSS, rows written."""
    shutil.rmtree(out, ignore_errors=True)
    cpu = _children_cpu()
    measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", str(corpus), "--output", str(out),
                             "--tokenizer", tokenizer, "--tokenizer_backend", "fast", *job_args],
                            env=job_environment(out.parent / "bytecode"))
    cpu = _children_cpu() - cpu
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out)
    return {"wall_s": measured.wall_s, "cpu_s": cpu, "peak_rss_mb": measured.peak_rss_mb,
            "tokens": manifest["counts"]["tokens"]}


def measure(tokenizer: str, corpora: list[Path], repeat: int, work: Path, limit: bool,
            job_args: tuple[str, ...] = ()) -> dict:
    """The job on every size, `repeat` rounds interleaved; the two fits."""
    sizes = [corpus_bytes(c) / 1e6 for c in corpora]
    # untimed: a checkout's first run of a tokenizer family compiles its numba kernels into the cache
    warm_up = work / "warm_up"
    shutil.rmtree(warm_up, ignore_errors=True)
    warm_up.mkdir()
    first = corpus_files(corpora[0])[0]
    os.link(first, warm_up / first.name)
    run_job(warm_up, tokenizer, work / "out", job_args)
    runs: list[list[dict]] = [[] for _ in corpora]
    for _ in range(repeat):
        for i, corpus in enumerate(corpora):
            runs[i].append(run_job(corpus, tokenizer, work / "out", job_args))
    wall = [statistics.median(r["wall_s"] for r in rs) for rs in runs]
    cpu = [statistics.median(r["cpu_s"] for r in rs) for rs in runs]
    result = {"tokenizer": tokenizer, "sizes_mb": sizes, "wall_s": wall, "cpu_s": cpu, "runs": runs,
              "job_mb_s": [s / w for s, w in zip(sizes, wall)]}
    for clock, prefix in ((wall, ""), (cpu, "cpu_")):
        try:
            result[f"{prefix}fixed_s"], result[f"{prefix}rate_mb_s"] = fit_line(sizes, clock)
        except ValueError as noisy:  # reported, not fatal: the other clock and tokenizers still count
            result[f"{prefix}fit_error"] = str(noisy)
    if limit:
        cpu_before = _children_cpu()
        bare = _step_limit(corpora[-1], tokenizer, "encode_batch")
        result["limit_cpu_s"] = _children_cpu() - cpu_before  # its whole process, start-up and reading included
        result["limit_mb_s"] = sizes[-1] / bare["wall_s"]
        result["job_vs_limit"] = result["job_mb_s"][-1] / result["limit_mb_s"]
        result["job_vs_limit_cpu"] = result["limit_cpu_s"] / cpu[-1]  # MB per CPU-second, job over bare
    return result


def markdown_table(results: list[dict]) -> str:
    sizes = results[0]["sizes_mb"] if results else []
    head = " | ".join(f"job {s:.3g} MB: wall s (MB/s)" for s in sizes)
    lines = [f"| tokenizer | {head} | fixed s | rate MB/s | CPU: fixed s | CPU: MB/s per CPU-second | "
             "bare `encode_batch`, all cores | job / bare |", "|---|" + "---|" * (len(sizes) + 6)]
    for r in results:
        cells = " | ".join(f"{w:.1f} ({s / w:.1f})" for s, w in zip(r["sizes_mb"], r["wall_s"]))
        limit = f"{r['limit_mb_s']:.2f}" if "limit_mb_s" in r else "-"
        ratio = f"{r['job_vs_limit']:.2f}x" if "job_vs_limit" in r else "-"
        if "job_vs_limit_cpu" in r:
            ratio += f" (CPU {r['job_vs_limit_cpu']:.2f}x)"
        fits = [f"{r[key]:.1f}" if key in r else "no fit" for key in ("fixed_s", "rate_mb_s", "cpu_fixed_s",
                                                                          "cpu_rate_mb_s")]
        lines.append(f"| {Path(r['tokenizer']).name} | {cells} | " + " | ".join(fits) + f" | {limit} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.job_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5,15,45", help="corpus sizes in MB, comma-separated (default 5,15,45)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tokenizer", action="append",
                        help="repeatable (default: bert-base-uncased, roberta.json, xlmr_unigram: one per family)")
    parser.add_argument("--corpus", help="a folder of distinct text to take the sizes from (default: generated)")
    parser.add_argument("--books", help="real books for the generator's fit (default ../shared/corpus/books)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", action="store_true", help="also the bare encode_batch on the largest size")
    parser.add_argument("--job_args", default="", help="flags added to every job run, in one string")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    try:
        sizes = sorted(float(s) for s in args.sizes.split(","))
    except ValueError:
        parser.error(f"--sizes takes MB figures separated by commas, got {args.sizes!r}")
    if len(set(sizes)) < 2 or sizes[0] <= 0 or args.repeat < 1:
        parser.error("--sizes needs two or more distinct positive sizes, --repeat >= 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="maskbeam-job-cost-") as scratch:
        work = Path(scratch)
        source = Path(args.corpus) if args.corpus else work / "generated"
        if not args.corpus:
            from benchmarks.generate_corpus import generate, learn

            books = Path(args.books) if args.books else SHARED_BERT.parent.parent / "corpus" / "books"
            generate(learn(books), source, sizes[-1], seed=args.seed)
        corpora = nested_corpora(source, sizes, work / "sizes")
        for tokenizer in args.tokenizer or DEFAULT_TOKENIZERS:
            r = measure(tokenizer, corpora, args.repeat, work, args.limit, tuple(args.job_args.split()))
            results.append(r)
            print(f"{Path(tokenizer).name:20} " + ", ".join(f"{s:.1f} MB {w:.1f} s wall {c:.1f} s CPU" for s, w, c in
                                                           zip(r["sizes_mb"], r["wall_s"], r["cpu_s"]))
                  + "".join(f" | {name}: " + (f"{r[p + 'fixed_s']:.2f} s + bytes / {r[p + 'rate_mb_s']:.1f} MB/s"
                                              if p + "fixed_s" in r else r[p + "fit_error"])
                            for name, p in (("wall", ""), ("CPU", "cpu_")))
                  + (f" | bare encode_batch {r['limit_mb_s']:.2f} MB/s, job / bare {r['job_vs_limit']:.2f}x"
                     if "limit_mb_s" in r else ""), flush=True)
            if args.json:  # after each tokenizer, so a run cut short keeps what it measured
                Path(args.json).write_text(json.dumps({"sizes": sizes, "repeat": args.repeat, "results": results},
                                                      indent=2) + "\n")
    table = markdown_table(results)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": sizes, "repeat": args.repeat, "results": results},
                                              indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
