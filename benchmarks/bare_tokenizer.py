"""The limit: bare HF `tokenizers` (or the `tokie` peer) over the corpus' paragraphs with all cores,
nothing else (read, decode, split, encode). Prints one JSON line: bytes, tokens, seconds."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from tokenizers import Tokenizer

from benchmarks.corpus import corpus_files

_PARAGRAPH = re.compile(r"\n\s*\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--method", choices=["encode_batch", "encode_batch_fast", "tokie"], default="encode_batch")
    args = parser.parse_args()
    path = Path(args.tokenizer)
    file = str(path / "tokenizer.json" if path.is_dir() else path)
    if args.method == "tokie":  # the Rust peer, all cores, same pieces (its ids include [CLS]/[SEP]: 2 a piece)
        import tokie

        peer = tokie.Tokenizer.from_json(file)

        def encode(pieces, add_special_tokens=False):
            return [e.ids[1:-1] for e in peer.encode_batch(pieces)]
    else:
        encode = getattr(Tokenizer.from_file(file), args.method)
    start = time.perf_counter()
    n_bytes = n_tokens = 0
    for file in corpus_files(Path(args.corpus)):
        data = file.read_bytes()
        n_bytes += len(data)
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        paragraphs = [p for p in _PARAGRAPH.split(text) if p.strip()]
        n_tokens += sum(len(e) for e in encode(paragraphs, add_special_tokens=False))
    print(json.dumps({"bytes": n_bytes, "tokens": n_tokens, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
