"""CPU time of `DoubleArray.build` (the SentencePiece/Unigram tables' trie) against vocabulary size:
random pieces of 1-12 characters over Latin, accented, CJK and `▁` characters, the compile excluded.

    python -m benchmarks.trie_build [--sizes 16000 64000 250000]
"""

from __future__ import annotations

import argparse
import random
import time

from pipeline.kernels.tokenizer.sentencepiece.trie import DoubleArray


def vocabulary(size: int, seed: int = 0) -> dict[bytes, int]:
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(97, 123)] + list("áéíóúñçßøåæ漢字のかなカナ\u2581")
    out: dict[bytes, int] = {}
    while len(out) < size:
        out.setdefault("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))).encode(), len(out))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16_000, 64_000, 250_000])
    args = parser.parse_args(argv)
    DoubleArray.build({b"ab": 1})  # compile
    for size in args.sizes:
        entries = vocabulary(size)
        started = time.process_time()
        trie = DoubleArray.build(entries)
        seconds = time.process_time() - started
        print(f"{size:>9,} pieces ({sum(map(len, entries)):,} bytes): {seconds:.2f} s CPU, {trie.cells.shape[0]:,} cells")


if __name__ == "__main__":
    main()
