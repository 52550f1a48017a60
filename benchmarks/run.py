"""The throughput benchmark: the bare tokenizer limit, our job, transformers' run_mlm path, the
masking kernels and our memory, in one run on the same corpus and cores.

    python -m benchmarks.run --corpus DIR --tokenizer PATH [--scale N] [--repeat N] [--json FILE] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

from benchmarks.corpus import corpus_bytes, scaled_corpus
from benchmarks.procmon import run_measured

LIMIT_METHODS = ("encode_batch", "encode_batch_fast", "tokie")
_STAGE_LINE = re.compile(r"time: ([0-9.]+) s wall; worker seconds per stage: (.*)$", re.MULTILINE)


def _median_range(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _stages(log: str) -> dict:
    """The job's own account of its time: pipeline wall seconds and worker seconds per stage."""
    match = _STAGE_LINE.search(log)
    if not match:
        return {}
    stages = {name: float(value) for name, value in (part.rsplit(" ", 1) for part in match.group(2).split(", "))}
    return {"pipeline_wall_s": float(match.group(1)), **stages}


def _step_ours(corpus: Path, tokenizer: str, work: Path, *extra: str) -> dict:
    out = work / "ours"
    shutil.rmtree(out, ignore_errors=True)
    measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", str(corpus), "--output", str(out),
                             "--tokenizer", tokenizer, *extra])
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out)
    stages = _stages(measured.stderr)
    if stages:  # what is left of the wall time: interpreter, imports, listing, Beam set-up and shut-down
        stages["launcher_and_beam_s"] = measured.wall_s - stages["pipeline_wall_s"]
    return {"wall_s": measured.wall_s, "peak_rss_mb": measured.peak_rss_mb, "tokens": manifest["counts"]["tokens"],
            "stages": stages}


def _step_limit(corpus: Path, tokenizer: str, method: str) -> dict:
    measured = run_measured([sys.executable, "-m", "benchmarks.bare_tokenizer", "--corpus", str(corpus),
                             "--tokenizer", tokenizer, "--method", method])
    result = json.loads(measured.stdout.strip().splitlines()[-1])
    # The limit's clock is the encode loop alone (no interpreter start-up): the strictest reference.
    return {"wall_s": result["seconds"], "peak_rss_mb": measured.peak_rss_mb, "tokens": result["tokens"]}


def _step_peer(corpus: Path, tokenizer: str, work: Path) -> dict:
    out, cache = work / "peer", work / "peer_cache"
    for folder in (out, cache):
        shutil.rmtree(folder, ignore_errors=True)
    measured = run_measured([sys.executable, "-m", "benchmarks.peer_run_mlm", "--corpus", str(corpus),
                             "--tokenizer", tokenizer, "--output", str(out), "--cache_dir", str(cache)])
    result = json.loads(measured.stdout.strip().splitlines()[-1])
    for folder in (out, cache):
        shutil.rmtree(folder, ignore_errors=True)
    return {"wall_s": measured.wall_s, "peak_rss_mb": measured.peak_rss_mb, "tokens": result["tokens"]}


def _step_name(method: str) -> str:
    if method == "tokie":
        return "limit: tokie.encode_batch"
    return f"limit: tokenizers.{method}" if method in LIMIT_METHODS else method


def _summarise(name: str, runs: list[dict], n_bytes: int) -> dict:
    walls = [r["wall_s"] for r in runs]
    mbps = [n_bytes / 1e6 / w for w in walls]
    return {
        "step": name,
        "runs": runs,
        "mb_per_s": _median_range(mbps),
        "m_tokens_per_s": statistics.median(r["tokens"] / 1e6 / r["wall_s"] for r in runs),
        "wall_s": _median_range(walls),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }


def run(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="folder of .txt books")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (tokenizer.json + configs)")
    parser.add_argument("--scale", type=int, default=1, help="repeat the corpus N times under distinct names")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write all figures to this file")
    parser.add_argument("--plot", help="write a bar chart PNG")
    parser.add_argument("--work_dir", help="scratch folder (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.repeat < 1:
        parser.error("--scale and --repeat must be >= 1")

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="maskbeam-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    base = Path(args.corpus)
    corpus = scaled_corpus(base, args.scale, work / "corpus")
    n_bytes = corpus_bytes(corpus)
    limits = [m for m in LIMIT_METHODS if m != "tokie" or importlib.util.find_spec("tokie")]
    runs: dict[str, list[dict]] = {name: [] for name in (*limits, "ours", "peer_run_mlm")}
    for _ in range(args.repeat):  # interleaved, so machine noise hits every step alike
        for method in limits:
            runs[method].append(_step_limit(corpus, args.tokenizer, method))
        runs["ours"].append(_step_ours(corpus, args.tokenizer, work))
        runs["peer_run_mlm"].append(_step_peer(corpus, args.tokenizer, work))
    steps = [_summarise(_step_name(m), r, n_bytes) for m, r in runs.items()]
    memory_1x = _step_ours(base, args.tokenizer, work) if args.scale != 1 else None
    memory_4x = _step_ours(scaled_corpus(base, 4, work / "corpus4"), args.tokenizer, work) if args.scale != 4 else None
    by_name = {s["step"]: s for s in steps}
    ours = by_name["ours"]
    limit = max((by_name[_step_name(m)] for m in limits if m != "tokie"), key=lambda s: s["mb_per_s"][0])
    tokenize = json.loads(run_measured([sys.executable, "-m", "benchmarks.tokenize", "--corpus", str(base),
                                        "--tokenizer", args.tokenizer, "--repeat", str(max(3, args.repeat))]
                                       ).stdout.strip().splitlines()[-1])
    stage_runs = [r["stages"] for r in runs["ours"] if r.get("stages")]
    stages = {name: statistics.median(s[name] for s in stage_runs) for name in (stage_runs[0] if stage_runs else {})}
    rss_1x = memory_1x["peak_rss_mb"] if memory_1x else ours["peak_rss_mb"]
    rss_4x = memory_4x["peak_rss_mb"] if memory_4x else ours["peak_rss_mb"]
    masking = json.loads(run_measured([sys.executable, "-m", "benchmarks.masking", "--tokenizer", args.tokenizer,
                                       "--repeat", str(max(3, args.repeat))]).stdout.strip().splitlines()[-1])
    report = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "corpus": str(base), "scale": args.scale, "corpus_mb": n_bytes / 1e6, "repeat": args.repeat,
        "steps": steps,
        "masking_m_tokens_per_s": {k: v for k, v in masking.items() if not k.endswith("_all")},
        "masking_runs": {k: v for k, v in masking.items() if k.endswith("_all")},
        "memory": {"ours_1x_peak_rss_mb": rss_1x, "ours_4x_peak_rss_mb": rss_4x},
        "tokenize_one_thread": tokenize,
        "ours_stages_s": stages,
        "ratios": {
            "ours_vs_limit": ours["mb_per_s"][0] / limit["mb_per_s"][0],
            "limit_used": limit["step"],
            "ours_vs_limit_encode_batch": ours["mb_per_s"][0] / by_name["limit: tokenizers.encode_batch"]["mb_per_s"][0],
            "ours_vs_run_mlm": ours["mb_per_s"][0] / by_name["peer_run_mlm"]["mb_per_s"][0],
            "ours_vs_tokie_all_cores": (ours["mb_per_s"][0] / by_name[_step_name("tokie")]["mb_per_s"][0]
                                        if "tokie" in limits else None),
            "tokenize_vs_encode_batch_fast_one_thread": tokenize["vs_encode_batch_fast"]["maskbeam fast"],
            "tokenize_vs_tokie_one_thread": (tokenize["mb_per_s"]["maskbeam fast"][0]
                                             / tokenize["mb_per_s"]["tokie encode_batch"][0]
                                             if "tokie encode_batch" in tokenize["mb_per_s"] else None),
            "masking_vs_collator_torch": masking["ours"] / masking["collator_torch"],
            "masking_vs_collator_numpy": masking["ours"] / masking["collator_numpy"],
            "rss_4x_vs_1x": rss_4x / rss_1x,
        },
    }
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        plot_report(report, args.plot)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return report


def format_report(report: dict) -> str:
    lines = [f"{report['date']} | {report['machine']} | corpus {report['corpus_mb']:.1f} MB "
             f"(scale {report['scale']}), {report['repeat']} runs each, medians (min-max)",
             f"{'step':32} {'MB/s':>22} {'M tok/s':>8} {'wall s':>22} {'peak RSS MB':>12}"]
    for s in report["steps"]:
        mb, wall = s["mb_per_s"], s["wall_s"]
        lines.append(f"{s['step']:32} {mb[0]:7.2f} ({mb[1]:.2f}-{mb[2]:.2f}){'':3} {s['m_tokens_per_s']:8.2f} "
                     f"{wall[0]:7.2f} ({wall[1]:.2f}-{wall[2]:.2f}){'':3} {s['peak_rss_mb']:12.0f}")
    mk = report["masking_m_tokens_per_s"]
    lines.append(f"masking, one thread, 256x512 rows (M tokens/s): ours {mk['ours']:.0f} "
                 f"(whole-word {mk['ours_whole_word']:.0f}, span {mk['ours_span']:.0f}), "
                 f"collator torch {mk['collator_torch']:.1f}, collator numpy {mk['collator_numpy']:.1f}")
    mem = report["memory"]
    lines.append(f"peak RSS of ours (process tree): 1x {mem['ours_1x_peak_rss_mb']:.0f} MB, "
                 f"4x {mem['ours_4x_peak_rss_mb']:.0f} MB")
    tok = report["tokenize_one_thread"]["mb_per_s"]
    lines.append("tokenization alone, one thread (MB/s): " + ", ".join(f"{k} {v[0]:.1f}" for k, v in tok.items()))
    if report.get("ours_stages_s"):
        lines.append("ours, where the time goes (s; stages are summed worker seconds): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in report["ours_stages_s"].items()))
    r = report["ratios"]
    lines.append(f"ratios: ours/limit(encode_batch) {r['ours_vs_limit_encode_batch']:.2f}, ours/tokie all cores "
                 f"{(r['ours_vs_tokie_all_cores'] or float('nan')):.2f}, tokenize one thread vs encode_batch_fast "
                 f"{r['tokenize_vs_encode_batch_fast_one_thread']:.1f}x, vs tokie "
                 f"{(r['tokenize_vs_tokie_one_thread'] or float('nan')):.2f}x")
    lines.append(f"ratios: ours/limit {r['ours_vs_limit']:.2f} (vs {r['limit_used']}; "
                 f"{r['ours_vs_limit_encode_batch']:.2f} vs encode_batch), "
                 f"ours/run_mlm {r['ours_vs_run_mlm']:.2f}, masking ours/collator torch "
                 f"{r['masking_vs_collator_torch']:.1f} numpy {r['masking_vs_collator_numpy']:.1f}, "
                 f"RSS 4x/1x {r['rss_4x_vs_1x']:.2f}")
    return "\n".join(lines)


def plot_report(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    steps = report["steps"]
    names = [s["step"].replace("limit: tokenizers.", "limit\n").replace("limit: tokie.", "tokie\n") for s in steps]
    medians = [s["mb_per_s"][0] for s in steps]
    errors = [[s["mb_per_s"][0] - s["mb_per_s"][1] for s in steps], [s["mb_per_s"][2] - s["mb_per_s"][0] for s in steps]]
    colours = ["#2a7" if s["step"] == "ours" else "#c55" if "peer" in s["step"] else "#999" for s in steps]
    left.bar(names, medians, yerr=errors, capsize=4, color=colours)
    left.set_ylabel("MB/s (median, min-max)")
    left.set_title(f"End to end, {report['corpus_mb']:.0f} MB corpus")
    mk = report["masking_m_tokens_per_s"]
    right.bar(["ours", "ours\nword", "ours\nspan", "collator\ntorch", "collator\nnumpy"],
              [mk["ours"], mk["ours_whole_word"], mk["ours_span"], mk["collator_torch"], mk["collator_numpy"]],
              color=["#2a7", "#2a7", "#2a7", "#c55", "#c55"])
    right.set_ylabel("M tokens/s, one thread")
    right.set_title("Masking kernel")
    fig.suptitle(f"MaskBeam benchmark, {report['date']}, {report['machine']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    run()
