"""Two checkouts' `jobs.preprocess` on one corpus, configuration by configuration: every output file's
sha256 compared (shards, inputs.jsonl, manifest, the rest), so a memory change is shown to change no byte.

    python -m benchmarks.same_output --before /path/to/other/checkout [--work DIR] [--configs default,dedup]
        [--before_python /path/to/venv/bin/python]

The corpus (made once under WORK/corpus): 60 small files cut from the sample books, 6 exact copies,
near duplicates (a word changed) and a chain of them, plus a large text file and a large .jsonl
that `--split_bytes 40000` reads in byte ranges; `split_only` is a corpus of those two alone.
Each configuration runs in both checkouts into the same output path (the manifest names it), one
after the other; prints one JSON line a configuration and a last line {"same": true|false}.
`--before_python` runs the before side under another interpreter: another environment's libraries
(e.g. a venv with `--system-site-packages` and another apache-beam) against this one's, with the same
checkout on both sides or two.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER

CONFIGS = {
    "default": [],
    "dedup": ["--dedup"],
    "near_dedup": ["--near_dedup", "0.7"],
    "both": ["--dedup", "--near_dedup", "0.7"],
    "split": ["--split_bytes", "40000"],
    "split_both": ["--split_bytes", "40000", "--dedup", "--near_dedup", "0.7"],
    "group_inputs_1": ["--group_inputs", "1", "--dedup"],
    "dynamic": ["--masking", "dynamic", "--dedup", "--near_dedup", "0.7"],
    "split_only": ["--split_bytes", "40000"],
}


def make_corpus(folder: Path) -> tuple[Path, Path]:
    """(the mixed corpus, the split-only corpus), written once."""
    mixed, split = folder / "mixed", folder / "split_only"
    if (folder / "done").is_file():
        return mixed, split
    shutil.rmtree(folder, ignore_errors=True)
    mixed.mkdir(parents=True)
    split.mkdir(parents=True)
    texts = [p.read_text(encoding="utf-8") for p in sorted(SAMPLE_BOOKS.glob("*.txt"))]
    paragraphs = [p for t in texts for p in t.split("\n\n") if len(p.split()) > 20]
    small = []
    for i in range(60):
        body = "\n\n".join(paragraphs[(i * 3 + k) % len(paragraphs)] for k in range(3))
        small.append(body)
        (mixed / f"doc{i:03d}.txt").write_text(body + "\n", encoding="utf-8")
    for i in range(6):  # exact copies, some earlier by path than their original
        (mixed / f"{'a' if i % 2 else 'z'}copy{i}.txt").write_text(small[i * 7] + "\n", encoding="utf-8")
    for i in range(6):  # near duplicates: one word changed; a chain on doc005
        words = small[5 if i < 3 else i * 5].split(" ")
        words[len(words) // (i + 2)] = "changed"
        (mixed / f"near{i}.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    (mixed / "empty.txt").write_text("", encoding="utf-8")
    big_text = "\n\n".join(texts)
    records = [json.dumps({"text": p}) for p in paragraphs[:400]]
    for target in (mixed, split):
        (target / "big_book.txt").write_text(big_text, encoding="utf-8")
        (target / "big_records.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    (split / "big_book_copy.txt").write_text(big_text, encoding="utf-8")
    (folder / "done").write_text("")
    return mixed, split


def output_hashes(output: Path) -> dict[str, str]:
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("*")) if p.is_file()}


def run_job(checkout: Path, corpus: Path, output: Path, args: list[str], log: Path, python: str = sys.executable
            ) -> int:
    shutil.rmtree(output, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [python, "-m", "jobs.preprocess", "--input", str(corpus), "--output", str(output),
            "--tokenizer", str(SAMPLE_TOKENIZER), "--max_seq_length", "64", "--validation_fraction", "0.1", *args]
    with open(log, "w") as handle:
        return subprocess.run(argv, cwd=checkout, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode


def main(argv: list[str] | None = None) -> bool:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the other checkout (its root)")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parents[1]), help="this checkout by default")
    parser.add_argument("--before_python", default=sys.executable,
                        help="the interpreter of the before side (default: this one)")
    parser.add_argument("--work", default="/tmp/maskbeam-same-output")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("job_args", nargs="*", help="more jobs.preprocess options for every run (after --)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    mixed, split = make_corpus(work / "corpus")
    same = True
    for name in args.configs.split(","):
        corpus = split if name == "split_only" else mixed
        output = work / "out"
        hashes, codes = {}, {}
        for side, checkout, python in (("before", args.before, args.before_python),
                                       ("after", args.after, sys.executable)):
            codes[side] = run_job(Path(checkout), corpus, output, [*CONFIGS[name], *args.job_args],
                                  work / f"{name}-{side}.log", python)
            hashes[side] = output_hashes(output) if codes[side] == 0 else {}
        differ = sorted(k for k in set(hashes["before"]) | set(hashes["after"])
                        if hashes["before"].get(k) != hashes["after"].get(k))
        ok = codes["before"] == codes["after"] == 0 and not differ
        same &= ok
        print(json.dumps({"config": name, "same": ok, "files": len(hashes["after"]), "returncodes": codes,
                          "differ": differ[:10]}), flush=True)
    print(json.dumps({"same": same}))
    return same


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
