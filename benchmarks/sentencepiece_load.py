"""What loading a large SentencePiece tokenizer costs a job, in CPU seconds of one process: the
launcher's part (the spec, the backend, whether any cut is proven) and a worker's (the content
tokenizer, the fast tokenizer with its tables and cuts).

    python -m benchmarks.j2_tokenizer --out /tmp/j2.json
    python -m benchmarks.sentencepiece_load --write-xlmr-style /tmp/j2.json /tmp/j2_xlmr.json
    python -m benchmarks.sentencepiece_load /tmp/j2.json /tmp/j2_xlmr.json

The second file is J2's 262k vocabulary in XLM-R's shape: `<pad>` `<s>` `</s>` `<unk>` `<mask>` are
vocabulary pieces marked special, so the content tokenizer (special pieces emptied) is another JSON
text than the tokenizer.json, as for every converted XLM-R, mT5 or DeBERTa-v3. Each file is loaded in
a fresh process (numba's kernels from its cache: run once untimed first). The script imports only
`pipeline` in its measuring processes (this file run with `-P`), so PYTHONPATH may point at another checkout
to compare.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median


def xlmr_style(raw: str) -> str:
    """J2 with its first four pieces renamed `<pad>` `<s>` `</s>` `<unk>`, a `<mask>` piece appended
    and those five marked special, as XLM-R's tokenizer.json has them."""
    from tokenizers import AddedToken, Tokenizer

    config = json.loads(raw)
    vocab = config["model"]["vocab"]
    for i, name in enumerate(("<pad>", "<s>", "</s>", "<unk>")):
        vocab[i][0] = name
    vocab.append(["<mask>", 0.0])
    tokenizer = Tokenizer.from_str(json.dumps(config, ensure_ascii=False))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t in ("<pad>", "<s>", "</s>", "<unk>", "<mask>")])
    return tokenizer.to_str()


def measure(path: Path) -> dict[str, float]:
    """CPU seconds of the launcher's and a worker's loading of the tokenizer.json at `path`."""
    from pipeline.tokenizer.derived_cuts import no_cut_reason
    from pipeline.tokenizer.fast import FastTokenizer, choose_backend
    from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer

    raw = path.read_text(encoding="utf-8")
    t0 = time.process_time()
    spec = TokenizerSpec.from_json(raw)
    backend, _ = choose_backend("auto", spec.json)
    no_cut_reason(spec.json)
    t1 = time.process_time()
    tokenizer = build_tokenizer(spec)
    if backend == "fast":
        tokenizer = FastTokenizer(tokenizer, spec.json)
    t2 = time.process_time()
    return {"launcher_s": t1 - t0, "worker_s": t2 - t1, "backend": backend}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--write-xlmr-style", nargs=2, type=Path, metavar=("J2_JSON", "OUT"))
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per file")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child process: one measurement
    args = parser.parse_args()
    if args.write_xlmr_style:
        source, out = args.write_xlmr_style
        out.write_text(xlmr_style(source.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote {out}")
        return
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    for path in args.paths:
        runs = []
        for _ in range(args.repeat):
            done = subprocess.run([sys.executable, "-P", __file__, "--one", str(path)],
                                  capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{path.name}: backend {runs[0]['backend']}, launcher {median(r['launcher_s'] for r in runs):.2f} s, "
              f"worker {median(r['worker_s'] for r in runs):.2f} s CPU (medians of {len(runs)})")


if __name__ == "__main__":
    main()
