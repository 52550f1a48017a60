"""Tokenization alone, one thread: MaskBeam's fast backend against HF `tokenizers` (encode_batch and
encode_batch_fast) and `tokie` (a Rust tokenizer, `pip install tokie`), on the same paragraph pieces,
pinned to one core. Every method's ids are checked against HF's before any time counts.

    python -m benchmarks.tokenize --corpus DIR --tokenizer DIR_OR_JSON [--repeat 3] [--hf_mb 40] [--unit documents]
        [--scale 10] [--clock wall|process]

`--unit pieces` (default, WordPiece's published figures) encodes blank-line paragraphs (ours joins a
batch with spaces, the same ids for WordPiece); `--unit documents` encodes each whole cleaned book in
one call (what the job does; the only fair unit for byte-level BPE and SentencePiece, whose ids
depend on the whitespace that paragraph pieces drop). With documents `tokie` is timed two ways:
`encode_batch_flat` of one document (ids as a numpy array, as ours returns them: the fair peer) and
`encode(text).ids` (a Python list: about 40% slower, the way session-6 figures were taken).

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
from tokenizers import Tokenizer  # noqa: E402

from benchmarks.corpus import corpus_files  # noqa: E402
from pipeline.kernels.text.cleaning import NotText, clean_bytes  # noqa: E402
from pipeline.tokenizer.encode import ENCODE_BATCH, iter_paragraphs, tokenize_text  # noqa: E402
from pipeline.tokenizer.fast import FastTokenizer  # noqa: E402
from pipeline.tokenizer.resolve import resolve_tokenizer_json  # noqa: E402


def _pieces(corpus: Path, unit: str) -> list[str]:
    pieces = []
    for path in corpus_files(corpus):
        try:
            text = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
        pieces.extend(iter_paragraphs(text) if unit == "pieces" else [text])
    return pieces


def _batches(pieces: list[str], unit: str) -> list[list[str]]:
    size = ENCODE_BATCH if unit == "pieces" else 1
    return [pieces[i:i + size] for i in range(0, len(pieces), size)]


def _methods(tokenizer_path: str, unit: str):
    tokenizer_json = resolve_tokenizer_json(tokenizer_path)
    real = Tokenizer.from_str(tokenizer_json)  # as build_tokenizer, without the job's row checks (T5 has no [CLS])
    real.encode_special_tokens = True
    fast = FastTokenizer(real, tokenizer_json)
    methods = {
        "hf encode_batch": lambda batch: [e.ids for e in real.encode_batch(batch, add_special_tokens=False)],
        "hf encode_batch_fast": lambda batch: [e.ids for e in real.encode_batch_fast(batch, add_special_tokens=False)],
        "maskbeam fast": ((lambda batch: [fast.encode(" ".join(batch))]) if unit == "pieces"
                          else (lambda batch: [tokenize_text(fast, text) for text in batch])),
    }
    try:
        import tokie

        file = Path(tokenizer_path)
        peer = tokie.Tokenizer.from_json(str(file / "tokenizer.json" if file.is_dir() else file))
        if unit == "pieces":
            methods["tokie encode_batch"] = lambda batch: [
                e.ids for e in peer.encode_batch(batch, add_special_tokens=False)]
        else:  # its fastest way to an id array (no Python list), and the `.ids` list the earlier figures used
            methods["tokie encode_batch_flat"] = lambda batch: [
                peer.encode_batch_flat([text], add_special_tokens=False)[0] for text in batch]
            methods["tokie encode().ids"] = lambda batch: [
                peer.encode(text, add_special_tokens=False).ids for text in batch]
    except ImportError:
        pass
    return methods


def _flat(result: list) -> np.ndarray:
    return np.concatenate([np.asarray(ids, dtype=np.int64) for ids in result]) if result else np.zeros(0)


CHECKED_BATCHES = 20  # batches (documents, or ENCODE_BATCH pieces) whose ids every method must match


def _check(method, expected: list[np.ndarray], batches: list[list[str]]) -> bool:
    """Whether the method's ids equal HF's (`expected`, one array a batch) on the first batches
    (every method encodes without the post-processor's special tokens)."""
    return all(np.array_equal(want, _flat(method(batch))) for want, batch in zip(expected, batches))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hf_mb", type=float, default=40.0)
    parser.add_argument("--unit", choices=["pieces", "documents"], default="pieces")
    parser.add_argument("--scale", type=int, default=1,
                        help="the corpus this many times over (in memory): repeated text fills the tokenizers' "
                        "caches as a real corpus does not; say so beside any figure from N > 1")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="time by the wall clock, or by this process's CPU time (far less sensitive to other "
                        "processes on a shared machine; every method runs on this one thread)")
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error(f"--scale must be >= 1, got {args.scale}")
    if args.scale > 1:
        print(f"note: --scale {args.scale} reads the same text {args.scale} times: figures on repeated text")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    pieces = _pieces(Path(args.corpus), args.unit) * args.scale
    batches = _batches(pieces, args.unit)
    sizes = [sum(len(p.encode()) for p in batch) for batch in batches]
    hf_batches, total = [], 0
    for batch, size in zip(batches, sizes):
        if total >= args.hf_mb * 1e6:
            break
        hf_batches.append(batch)
        total += size
    methods = _methods(args.tokenizer, args.unit)
    reference = methods["hf encode_batch_fast"]
    expected = [_flat(reference(batch)) for batch in batches[:CHECKED_BATCHES]]  # HF is slow: once
    inexact = [name for name, method in methods.items() if not _check(method, expected, batches)]
    if any(not name.startswith("tokie") for name in inexact):
        raise SystemExit(f"{inexact}: ids differ from HF's")
    for name in inexact:  # a peer with other ids is reported, not timed
        print(f"{name}: ids differ from HF's: not timed")
        del methods[name]
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeat):  # interleaved, so machine noise hits every method alike
        for name, method in methods.items():
            work = hf_batches if name.startswith("hf") else batches
            n_bytes = sum(sizes[: len(work)])
            started = clock()
            for batch in work:
                method(batch)
            rates[name].append(n_bytes / 1e6 / (clock() - started))
    summary = {name: (statistics.median(r), min(r), max(r)) for name, r in rates.items()}
    base = summary["hf encode_batch_fast"][0]
    report = {"mb_per_s": summary, "vs_encode_batch_fast": {name: s[0] / base for name, s in summary.items()},
              "corpus_mb": sum(sizes) / 1e6, "hf_mb": total / 1e6, "threads": 1, "unit": args.unit, "scale": args.scale,
              "clock": args.clock, "inexact": inexact}
    ours = rates["maskbeam fast"]
    report["maskbeam_vs_peer"] = {  # ratio of the medians, and the median of each repeat's ratio (paired in time)
        name: (summary["maskbeam fast"][0] / summary[name][0], statistics.median(o / p for o, p in zip(ours, r)))
        for name, r in rates.items() if name.startswith("tokie")}
    for name, (median, low, high) in summary.items():
        print(f"{name:22s} {median:8.2f} MB/s ({low:.2f}-{high:.2f})  x{median / base:5.1f} vs encode_batch_fast")
    for name, (of_medians, paired) in report["maskbeam_vs_peer"].items():
        print(f"maskbeam fast / {name}: {of_medians:.3f} (median of the repeats' ratios {paired:.3f})")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
