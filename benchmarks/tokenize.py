"""Tokenization alone, one thread: MaskBeam's fast backend against HF `tokenizers` (encode_batch and
encode_batch_fast) and `tokie` (a Rust tokenizer, `pip install tokie`), on the same paragraph pieces,
pinned to one core. Every method's ids are checked against HF's before any time counts.

    python -m benchmarks.tokenize --corpus DIR --tokenizer DIR [--repeat 3] [--hf_mb 40]

Prints one JSON line (MB/s per method: median, min, max; ratios to encode_batch_fast). HF runs at
2 MB/s on one thread, so it is timed on the first `--hf_mb` megabytes of the same pieces (its rate
does not depend on the amount); the fast methods run on everything.
"""

from __future__ import annotations

import os

# One thread for every library, set before any of them starts its pool.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.corpus import corpus_files  # noqa: E402
from pipeline.kernels.cleaning import NotText, clean_bytes  # noqa: E402
from pipeline.tokenizer.encode import ENCODE_BATCH, iter_paragraphs  # noqa: E402
from pipeline.tokenizer.fast import FastTokenizer  # noqa: E402
from pipeline.tokenizer.resolve import resolve_tokenizer_json  # noqa: E402
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer  # noqa: E402


def _pieces(corpus: Path) -> list[str]:
    pieces = []
    for path in corpus_files(corpus):
        try:
            pieces.extend(iter_paragraphs(clean_bytes(path.read_bytes()).text))
        except NotText:
            continue
    return pieces


def _batches(pieces: list[str]) -> list[list[str]]:
    return [pieces[i:i + ENCODE_BATCH] for i in range(0, len(pieces), ENCODE_BATCH)]


def _methods(tokenizer_path: str):
    tokenizer_json = resolve_tokenizer_json(tokenizer_path)
    real = build_tokenizer(TokenizerSpec.from_json(tokenizer_json))
    fast = FastTokenizer(real, tokenizer_json)
    methods = {
        "hf encode_batch": lambda batch: [e.ids for e in real.encode_batch(batch, add_special_tokens=False)],
        "hf encode_batch_fast": lambda batch: [e.ids for e in real.encode_batch_fast(batch, add_special_tokens=False)],
        "maskbeam fast": lambda batch: [fast.encode(" ".join(batch))],
    }
    try:
        import tokie

        file = Path(tokenizer_path)
        peer = tokie.Tokenizer.from_json(str(file / "tokenizer.json" if file.is_dir() else file))
        methods["tokie encode_batch"] = lambda batch: [e.ids for e in peer.encode_batch(batch)]
    except ImportError:
        pass
    return methods


def _flat(result: list) -> np.ndarray:
    return np.concatenate([np.asarray(ids, dtype=np.int64) for ids in result]) if result else np.zeros(0)


def _check(name: str, method, reference, batches: list[list[str]]) -> None:
    """The method's ids equal HF's on the first batches (tokie adds [CLS]/[SEP]: they are cut)."""
    for batch in batches[:20]:
        want = _flat(reference(batch))
        got = _flat(method(batch))
        if name.startswith("tokie"):
            got = np.concatenate([np.asarray(ids[1:-1]) for ids in method(batch)]) if batch else got
        if not np.array_equal(want, got):
            raise SystemExit(f"{name}: ids differ from HF's")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hf_mb", type=float, default=40.0)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    pieces = _pieces(Path(args.corpus))
    batches = _batches(pieces)
    sizes = [sum(len(p.encode()) for p in batch) for batch in batches]
    hf_batches, total = [], 0
    for batch, size in zip(batches, sizes):
        if total >= args.hf_mb * 1e6:
            break
        hf_batches.append(batch)
        total += size
    methods = _methods(args.tokenizer)
    reference = methods["hf encode_batch_fast"]
    for name, method in methods.items():
        _check(name, method, reference, batches)
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeat):  # interleaved, so machine noise hits every method alike
        for name, method in methods.items():
            work = hf_batches if name.startswith("hf") else batches
            n_bytes = sum(sizes[: len(work)])
            started = time.perf_counter()
            for batch in work:
                method(batch)
            rates[name].append(n_bytes / 1e6 / (time.perf_counter() - started))
    summary = {name: (statistics.median(r), min(r), max(r)) for name, r in rates.items()}
    base = summary["hf encode_batch_fast"][0]
    report = {"mb_per_s": summary, "vs_encode_batch_fast": {name: s[0] / base for name, s in summary.items()},
              "corpus_mb": sum(sizes) / 1e6, "hf_mb": total / 1e6, "threads": 1}
    for name, (median, low, high) in summary.items():
        print(f"{name:22s} {median:8.2f} MB/s ({low:.2f}-{high:.2f})  x{median / base:5.1f} vs encode_batch_fast")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
