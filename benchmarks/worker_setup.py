"""A worker's fixed tokenizer cost: CPU seconds to build the tokenizer from the shipped spec and
encode its first document, and how many whole-tokenizer `json.loads` that takes (issue 33).

    python -m benchmarks.worker_setup TOKENIZER [TOKENIZER ...] [--backend hf|fast ...] [--repeat 2]

Each measurement is a fresh interpreter (a worker process starts with nothing parsed): the spec is
made as the launcher makes it, shipped as JSON, read back, then `spec.build_tokenizer` (with
`FastTokenizer` on `fast`) and a `DocumentEncoder` over one short document, timed by
`time.process_time`. TOKENIZER: a tokenizer.json or a folder holding one (`benchmarks.real_tokenizers`
writes Qwen3.6's and DeepSeek's). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

BIG = 1_000_000  # characters: a json.loads of more is a whole tokenizer's


def _child(path: str, backend: str) -> dict:
    from pipeline.tokenizer.encode import DocumentEncoder
    from pipeline.tokenizer.fast import FastTokenizer
    from pipeline.tokenizer.parsed import release_parses
    from pipeline.tokenizer.resolve import resolve_tokenizer_json
    from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer

    spec = TokenizerSpec.from_json(resolve_tokenizer_json(path))
    shipped = json.dumps({f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})
    release_parses()
    real_loads, parses = json.loads, []

    def counted(text, *args, **kwargs):
        if isinstance(text, str) and len(text) > BIG:
            parses.append(len(text))
        return real_loads(text, *args, **kwargs)

    json.loads = counted
    start = time.process_time()
    fields = real_loads(shipped)
    for name in ("special_ids", "unused_ids", "continuation_ids"):
        fields[name] = tuple(fields[name])
    spec = TokenizerSpec(**fields)
    tokenizer = build_tokenizer(spec)
    if backend == "fast":
        tokenizer = FastTokenizer(tokenizer, spec.json)
    built = time.process_time()
    encoder = DocumentEncoder(tokenizer)
    ids = len(encoder.feed("Hello world. It was a bright cold day. " * 50)[0]) + len(encoder.finish()[0])
    done = time.process_time()
    return {"tokenizer": path, "backend": backend, "build_cpu_s": round(built - start, 3),
            "first_document_cpu_s": round(done - built, 3), "total_cpu_s": round(done - start, 3),
            "whole_tokenizer_parses": len(parses), "ids": ids}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tokenizers", nargs="+")
    parser.add_argument("--backend", action="append", choices=("hf", "fast"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.tokenizers[0], args.backend[0])))
        return []
    rows = []
    for _ in range(args.repeat):
        for path in args.tokenizers:
            for backend in args.backend or ["hf", "fast"]:
                done = subprocess.run([sys.executable, "-m", "benchmarks.worker_setup", path, "--backend", backend,
                                       "--child"], capture_output=True, text=True, check=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
