"""Where a single pass over the books costs the SentencePiece Unigram fast path its time, per book:
the kernel's own time, the chunks handed to the real tokenizer (fallback spans: characters the
per-code-point table does not vouch for), and HF's `encode_batch_fast` on the same book for the ratio.

    python -m benchmarks.unigram_profile --corpus ../shared/corpus/books [--tokenizer PATH ...] [--top 8]

Each tokenizer gets a fresh encoder (empty caches) and reads every book once (cold), then once more
(warm), one thread, CPU time; ids are checked against HF's on every book. The totals split our time
into the kernel (`encode_kernel`) and what is around it (the text's UTF-8 bytes, the output copy, the
special-id check, Python). Ratios only on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("RAYON_NUM_THREADS", "1")

from benchmarks.generate_corpus import corpus_files  # noqa: E402

TEST_TOKENIZERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
DEFAULT = (str(TEST_TOKENIZERS / "xlmr_unigram"), str(TEST_TOKENIZERS / "nmt_nfkc_unigram"))


def profile(path: str, texts: dict[str, str]) -> list[dict]:
    """Per book: bytes, our CPU seconds, of which in fallback spans, span bytes, HF's CPU seconds."""
    from tokenizers import Tokenizer

    from pipeline.tokenizer.fast import FastTokenizer

    file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    raw = file.read_text(encoding="utf-8")
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    fast = FastTokenizer(real, raw)
    impl = fast._impl
    fast.encode("A line to load the kernels.")  # its few chunks are all the cache holds
    spent = {"fallback_s": 0.0, "span_bytes": 0}
    batch = impl.tokenizer.encode_batch_fast

    def timed_batch(pieces, **kwargs):
        t = time.process_time()
        out = batch(pieces, **kwargs)
        spent["fallback_s"] += time.process_time() - t
        spent["span_bytes"] += sum(len(p.encode("utf-8", "surrogatepass")) for p in pieces)
        return out

    impl.tokenizer = _Timed(impl.tokenizer, timed_batch)
    from pipeline.tokenizer.sentencepiece import fast as module

    kernel = module.encode_kernel

    def timed_kernel(*args):
        t = time.process_time()
        result = kernel(*args)
        spent["kernel_s"] += time.process_time() - t
        return result

    spent["kernel_s"] = 0.0
    module.encode_kernel = timed_kernel
    try:
        return _passes(fast, real, file, texts, spent)
    finally:
        module.encode_kernel = kernel


def _passes(fast, real, file: Path, texts: dict[str, str], spent: dict) -> list[dict]:
    """The cold pass (per book, with HF's time) and the warm one (its total in the last row's `warm_*`)."""
    rows = []
    for name, text in texts.items():
        before = dict(spent)
        t = time.process_time()
        ids = fast.encode(text)
        ours = time.process_time() - t
        t = time.process_time()
        expected = real.encode_batch_fast([text], add_special_tokens=False)[0].ids
        hf = time.process_time() - t
        if not np.array_equal(ids, np.asarray(expected, dtype=np.int32)):
            raise SystemExit(f"{file}: ids differ from HF's on {name}")
        rows.append({"book": name, "bytes": len(text.encode("utf-8", "surrogatepass")), "ours_s": ours,
                     "kernel_s": spent["kernel_s"] - before["kernel_s"],
                     "fallback_s": spent["fallback_s"] - before["fallback_s"],
                     "span_bytes": spent["span_bytes"] - before["span_bytes"], "hf_s": hf})
    before = dict(spent)
    t = time.process_time()
    for text in texts.values():
        fast.encode(text)
    rows[-1]["warm_s"] = time.process_time() - t
    rows[-1]["warm_kernel_s"] = spent["kernel_s"] - before["kernel_s"]
    return rows


class _Timed:
    """The real tokenizer with its batch call timed (everything else passed through)."""

    def __init__(self, tokenizer, batch) -> None:
        self._tokenizer, self.encode_batch_fast = tokenizer, batch

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--tokenizer", action="append", help="tokenizer.json or folder (repeatable)")
    parser.add_argument("--top", type=int, default=8, help="books listed, slowest per byte first")
    args = parser.parse_args()
    from pipeline.kernels.text.cleaning import NotText, clean_bytes

    texts = {}
    for path in corpus_files(args.corpus):
        try:
            texts[path.name] = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
    for path in args.tokenizer or DEFAULT:
        rows = profile(path, texts)
        total = {k: sum(r[k] for r in rows) for k in ("bytes", "ours_s", "kernel_s", "fallback_s", "span_bytes", "hf_s")}
        warm, warm_kernel = rows[-1]["warm_s"], rows[-1]["warm_kernel_s"]
        print(f"{Path(path).name}: {total['bytes'] / 1e6:.1f} MB, ours {total['bytes'] / total['ours_s'] / 1e6:.1f} "
              f"MB/s cold ({total['kernel_s'] / total['ours_s']:.0%} in the kernel), "
              f"{total['bytes'] / warm / 1e6:.1f} warm ({warm_kernel / warm:.0%}), "
              f"HF {total['bytes'] / total['hf_s'] / 1e6:.2f} MB/s, ratio {total['hf_s'] / total['ours_s']:.1f}x cold;"
              f" fallback spans {total['span_bytes'] / total['bytes']:.2%} of the bytes, "
              f"{total['fallback_s'] / total['ours_s']:.0%} of our time")
        for r in sorted(rows, key=lambda r: -r["ours_s"] / r["bytes"])[:args.top]:
            print(f"  {r['book'][:44]:44s} {r['bytes'] / 1e6:5.2f} MB  ours {r['bytes'] / r['ours_s'] / 1e6:6.1f} MB/s"
                  f"  fallback {r['fallback_s'] / r['ours_s']:4.0%} of it ({r['span_bytes'] / r['bytes']:.2%} of bytes)"
                  f"  HF {r['bytes'] / r['hf_s'] / 1e6:5.2f} MB/s")


if __name__ == "__main__":
    main()
