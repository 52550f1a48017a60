"""The limit: bare HF `tokenizers` (or the `tokie` peer) over the corpus' paragraphs with all cores,
nothing else (read, decode, split, encode). Prints one JSON line: bytes, tokens, seconds, and for
`tokie` whether its ids equal HF's on a sample (`ids_equal_hf`).

Every method encodes without special tokens (`add_special_tokens=False`): the post-processor's
wrapping differs by family ([CLS]/[SEP], <s>/</s>, nothing for GPT-2 / Llama-3 style), so cutting a
fixed first and last token would drop real tokens of some tokenizers.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from tokenizers import Tokenizer

from benchmarks.corpus import corpus_files

_PARAGRAPH = re.compile(r"\n\s*\n")
SAMPLE_PARAGRAPHS = 200  # paragraphs of the first file whose tokie ids are compared with HF's


def _paragraphs(file: Path) -> tuple[int, list[str]]:
    data = file.read_bytes()
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    return len(data), [p for p in _PARAGRAPH.split(text) if p.strip()]


def tokie_matches_hf(peer, reference: Tokenizer, paragraphs: list[str]) -> bool:
    """Whether tokie's ids equal HF's `encode_batch(add_special_tokens=False)` on `paragraphs`."""
    want = [e.ids for e in reference.encode_batch(paragraphs, add_special_tokens=False)]
    got = [list(e.ids) for e in peer.encode_batch(paragraphs, add_special_tokens=False)]
    return want == got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--method", choices=["encode_batch", "encode_batch_fast", "tokie"], default="encode_batch")
    args = parser.parse_args()
    path = Path(args.tokenizer)
    file = str(path / "tokenizer.json" if path.is_dir() else path)
    files = corpus_files(Path(args.corpus))
    report: dict = {}
    if args.method == "tokie":  # the Rust peer, all cores, same pieces, no specials added
        import tokie

        peer = tokie.Tokenizer.from_json(file)
        if files:
            sample = _paragraphs(files[0])[1][:SAMPLE_PARAGRAPHS]
            report["ids_equal_hf"] = tokie_matches_hf(peer, Tokenizer.from_file(file), sample)

        def encode(pieces, add_special_tokens=False):
            return [e.ids for e in peer.encode_batch(pieces, add_special_tokens=add_special_tokens)]
    else:
        encode = getattr(Tokenizer.from_file(file), args.method)
    start = time.perf_counter()
    n_bytes = n_tokens = 0
    for corpus_file in files:
        size, paragraphs = _paragraphs(corpus_file)
        n_bytes += size
        n_tokens += sum(len(e) for e in encode(paragraphs, add_special_tokens=False))
    report = {"bytes": n_bytes, "tokens": n_tokens, "seconds": time.perf_counter() - start, **report}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
