"""SentencePiece-style tokenization alone, one thread: HF `tokenizers` encode_batch_fast, `tokie` and
MaskBeam's SentencePiece fast path (on the same paragraph pieces, and on the whole documents as the
job hands them over), on a share of every book, for the test
tokenizers of tests/data/tokenizers (XLM-R / T5 style Unigram with a Precompiled normalizer, a
Unigram behind Sequence[Nmt, NFKC, Replace], Llama-style byte-fallback BPE).

    python -m benchmarks.tokenize_sentencepiece [--corpus DIR] [--mb 3] [--repeat 3] [--scale 1]
        [--clock wall|process]

Our ids are checked against HF's on every piece before any time counts (a difference stops the
run); tokie's are compared too and the share of pieces where they differ is reported (tokie is a
peer, not a reference). Our chunk cache starts empty at every repeat. Prints a table and one JSON
line (MB/s medians, min, max; ratios). `--clock process` times by the process's CPU time (the
process is pinned to one core): on a machine shared with other work, wall time counts the time
the scheduler gave to others, CPU time does not.
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"  # one thread for every library, set before any starts its pool
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
from pipeline.kernels.tokenizer.sentencepiece.encode import chunk_cache  # noqa: E402
from pipeline.tokenizer.encode import ENCODE_BATCH, iter_paragraphs  # noqa: E402
from pipeline.tokenizer.sentencepiece.fast import CACHE_SLOTS, SentencePieceFastTokenizer  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "tokenizers"
TOKENIZERS = ("xlmr_unigram", "t5_unigram", "nmt_nfkc_unigram", "llama_bpe")


def _documents(corpus: Path, limit_mb: float) -> list[str]:
    """A share of each book (from its first third on), about limit_mb megabytes in all."""
    files = list(corpus_files(corpus))
    share = int(limit_mb * 1e6 / max(len(files), 1))
    documents = []
    for path in files:
        try:
            text = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
        start = len(text) // 3
        end = text.find("\n\n", start + share)
        documents.append(text[start:end if end > 0 else len(text)])
    return documents


def _measure(name: str, documents: list[str], repeat: int, clock=time.perf_counter, scale: int = 1) -> dict:
    raw = (DATA / name / "tokenizer.json").read_text(encoding="utf-8")
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    fast = SentencePieceFastTokenizer(real, raw)
    pieces = [piece for document in documents for piece in iter_paragraphs(document)]
    batches = [pieces[i:i + ENCODE_BATCH] for i in range(0, len(pieces), ENCODE_BATCH)]
    n_bytes = sum(len(p.encode()) for p in pieces)
    expected = [e.ids for e in real.encode_batch_fast(pieces, add_special_tokens=False)]
    for piece, ids in zip(pieces, expected):
        if not np.array_equal(fast.encode(piece), np.asarray(ids, dtype=np.int32)):
            raise SystemExit(f"{name}: our ids differ from HF's on {piece[:80]!r}")
    for document in documents:  # whole documents too: the way the job hands text over
        if not np.array_equal(fast.encode(document), real.encode(document, add_special_tokens=False).ids):
            raise SystemExit(f"{name}: our ids differ from HF's on a whole document {document[:80]!r}")
    doc_bytes = sum(len(d.encode()) for d in documents)
    methods = {"hf encode_batch_fast": lambda batch: real.encode_batch_fast(batch, add_special_tokens=False),
               "maskbeam pieces": lambda batch: [fast.encode(p) for p in batch],
               "maskbeam documents": None}
    tokie_differs = None
    try:
        import tokie

        peer = tokie.Tokenizer.from_json(str(DATA / name / "tokenizer.json"))
        got = [e.ids for batch in batches for e in peer.encode_batch(batch)]
        tokie_differs = sum(list(a) != list(b) for a, b in zip(got, expected)) / max(len(pieces), 1)
        methods["tokie encode_batch"] = peer.encode_batch
    except ImportError:
        pass
    rates: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(repeat):  # interleaved, so machine noise hits every method alike
        for method, run in methods.items():
            fast.cache = chunk_cache(CACHE_SLOTS)
            started = clock()
            if run is None:
                for _ in range(scale):  # the documents again and again: a corpus `scale` times as large
                    for document in documents:
                        fast.encode(document)
            else:
                for batch in batches:
                    run(batch)
            rates[method].append((doc_bytes * scale if run is None else n_bytes) / 1e6 / (clock() - started))
    summary = {m: (statistics.median(r), min(r), max(r)) for m, r in rates.items()}
    ours = summary["maskbeam documents"][0]
    return {"mb_per_s": summary, "ours_vs_hf": ours / summary["hf encode_batch_fast"][0],
            "ours_vs_tokie": ours / summary["tokie encode_batch"][0] if "tokie encode_batch" in summary else None,
            "tokie_pieces_differing": tokie_differs, "mb": n_bytes / 1e6, "pieces": len(pieces),
            "documents_mb": doc_bytes * scale / 1e6}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = Path(os.environ.get("MASKBEAM_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    parser.add_argument("--corpus", type=Path, default=default / "corpus" / "books")
    parser.add_argument("--mb", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizers", nargs="+", default=list(TOKENIZERS))
    parser.add_argument("--scale", type=int, default=1,
                        help="our path encodes the documents this many times over (a scaled corpus, cache "
                             "started empty once); HF and tokie, which keep nothing between calls, one copy")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall",
                        help="time by the wall clock or by the process's CPU time")
    args = parser.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    documents = _documents(args.corpus, args.mb)
    report = {name: dict(_measure(name, documents, args.repeat, clock, args.scale), clock=args.clock)
              for name in args.tokenizers}
    for name, result in report.items():
        for method, (median, low, high) in result["mb_per_s"].items():
            print(f"{name:18s} {method:24s} {median:8.2f} MB/s ({low:.2f}-{high:.2f})")
        tokie = result["ours_vs_tokie"]
        print(f"{name:18s} ours x{result['ours_vs_hf']:.1f} HF" + (f", x{tokie:.2f} tokie" if tokie else "")
              + f"; tokie differs from HF on {result['tokie_pieces_differing']:.1%} of pieces")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
