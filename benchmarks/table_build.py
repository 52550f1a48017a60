"""What loading a tokenizer costs a job, per process, against its vocabulary's size: every fast family
on synthetic vocabularies of 32k, 64k, 128k and 256k tokens (so that linearity is visible) and on
real ones (issue 33: "a 250k vocabulary in about a second").

    python -m benchmarks.real_tokenizers --output /tmp/real --only deepseek_v4,qwen,qwen3_6
    python -m benchmarks.j2_tokenizer --out /tmp/j2.json
    python -m benchmarks.table_build [--sizes 32000 64000 128000 256000] [--families bytelevel,wordpiece,unigram]
        [--tokenizer /tmp/real/*/tokenizer.json /tmp/j2.json] [--repeat 3] [--json FILE]

Each tokenizer.json is loaded in fresh processes (this file run with `-P`, so PYTHONPATH may point at
another checkout), each doing what a job does per process: the launcher's `TokenizerSpec.from_json`,
`choose_backend` and `no_cut_reason`; a worker's `build_tokenizer` and `FastTokenizer`, then one
short line encoded (numba's kernels loaded from its cache). Split by CPU time (`time.process_time`):

- `parse`: `json.loads` of the whole tokenizer.json (each call counted: `parses`; the launcher's and the
  worker's together, one process doing both);
- `tables`: the family's table build (its `_tables`) less the probes;
- `probes`: what the on-disk probe cache (`table_cache.cached_arrays`) had to build: once per machine
  and `tokenizers` version (the first process, run with an empty cache: `probes, first process`),
  none after;
- `numba`: the first encode (the kernels loaded from numba's cache);
- the rest: `tokenizers` building the real tokenizer (`Tokenizer.from_str`) and the checks.

Synthetic vocabularies are distinct tokens (never repeated text), in the shape of the small test
tokenizers (`tests/data/tokenizers`: RoBERTa's byte-level BPE with merges that build every token from
two others, bert-base-uncased's WordPiece extended with words and `##` pieces, XLM-R's Unigram with
pieces of Latin, accented and CJK letters), generated into a temporary folder, never committed.
One untimed process per file first (numba's cache filled). Medians of `--repeat` processes.
`--against CHECKOUT` runs another checkout's `pipeline` in processes alternating with ours (a
before/after on one loaded machine: read the ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ROOT / "tests" / "data" / "tokenizers"
BERT = ROOT.parent / "shared" / "tokenizers" / "bert-base-uncased" / "tokenizer.json"
SIZES = (32_000, 64_000, 128_000, 256_000)
FAMILIES = ("bytelevel", "wordpiece", "unigram")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_ACCENTED = "áéíóúñçßøåæ"
_CJK = "漢字のかなカナ中文"


def _word(rng: random.Random, alphabet: str, shortest: int, longest: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(shortest, longest)))


def bytelevel_json(size: int, seed: int = 0) -> str:
    """RoBERTa's tokenizer.json (its specials, ByteLevel pre-tokenizer) with `size` tokens: the 256
    bytes, then tokens each made by a merge of two earlier ones (so every merge is valid), most of
    them short as in a real vocabulary (a merge of a short token and a byte or a short token)."""
    config = json.loads((TOKENIZERS / "roberta.json").read_text(encoding="utf-8"))
    from pipeline.tokenizer.components import BYTE_CHARS

    specials = [t["content"] for t in sorted(config["added_tokens"], key=lambda t: t["id"])]
    tokens = specials + [BYTE_CHARS[b] for b in range(256)]
    vocab = {token: i for i, token in enumerate(tokens)}
    rng = random.Random(seed)
    merges = []
    base = len(specials)
    while len(vocab) < size:
        low = base + rng.randrange(256) if rng.random() < 0.5 else rng.randrange(base, len(tokens))
        a = tokens[rng.randrange(base, len(tokens))] if rng.random() < 0.3 else tokens[low]
        b = tokens[base + rng.randrange(256)] if rng.random() < 0.6 else tokens[rng.randrange(base, len(tokens))]
        if len(a) + len(b) > 16 or a + b in vocab:
            continue
        vocab[a + b] = len(tokens)
        tokens.append(a + b)
        merges.append([a, b])
    config["model"]["vocab"] = vocab
    config["model"]["merges"] = merges
    return json.dumps(config, ensure_ascii=False)


def wordpiece_json(size: int, seed: int = 0) -> str:
    """bert-base-uncased (its 30,522 tokens, specials, normalizer) extended to `size` tokens with
    words and `##` pieces of lower-case, accented and CJK letters."""
    config = json.loads(BERT.read_text(encoding="utf-8"))
    vocab = config["model"]["vocab"]
    rng = random.Random(seed)
    while len(vocab) < size:
        alphabet = _LETTERS if rng.random() < 0.9 else _LETTERS + _ACCENTED
        token = ("##" if rng.random() < 0.3 else "") + _word(rng, alphabet, 2, 12)
        vocab.setdefault(token, len(vocab))
    return json.dumps(config, ensure_ascii=False)


def unigram_json(size: int, seed: int = 0) -> str:
    """The XLM-R-shaped Unigram test tokenizer (Precompiled normalizer, Metaspace, `<mask>` last)
    with pieces of Latin, accented and CJK letters, `▁` before most, up to `size` pieces."""
    config = json.loads((TOKENIZERS / "xlmr_unigram" / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = config["model"]["vocab"]
    mask = vocab.pop()  # ["<mask>", 0.0]: stays the last piece, as the added token's id says
    seen = {piece for piece, _ in vocab}
    rng = random.Random(seed)
    while len(vocab) < size - 1:
        alphabet = _LETTERS if rng.random() < 0.8 else _LETTERS + _ACCENTED + _CJK
        piece = ("\u2581" if rng.random() < 0.6 else "") + _word(rng, alphabet, 1, 10)
        if piece not in seen:
            seen.add(piece)
            vocab.append([piece, -5.0 - 10.0 * rng.random()])
    vocab.append(mask)
    for token in config["added_tokens"]:
        if token["content"] == mask[0]:
            token["id"] = len(vocab) - 1
    return json.dumps(config, ensure_ascii=False)


MAKERS = {"bytelevel": bytelevel_json, "wordpiece": wordpiece_json, "unigram": unigram_json}


def measure(path: Path) -> dict:
    """One process' load of the tokenizer.json at `path`, split as the module docstring says."""
    started = time.process_time()
    import pipeline.tokenizer.bytelevel.fast as bytelevel
    import pipeline.tokenizer.sentencepiece.fast as sentencepiece
    import pipeline.tokenizer.wordpiece.fast as wordpiece
    from pipeline.tokenizer.derived_cuts import no_cut_reason
    from pipeline.tokenizer.fast import FastTokenizer, choose_backend
    from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer

    imports = time.process_time() - started
    raw = path.read_text(encoding="utf-8")
    clock = {"parse": 0.0, "parses": 0, "tables": 0.0, "probes": 0.0, "table_probes": 0.0}

    loads = json.loads

    def timed_loads(text, *args, **kwargs):
        if len(text) < len(raw) // 2:
            return loads(text, *args, **kwargs)
        t0 = time.process_time()
        try:
            return loads(text, *args, **kwargs)
        finally:
            clock["parse"] += time.process_time() - t0
            clock["parses"] += 1

    json.loads = timed_loads
    for module in list(sys.modules.values()):
        cached = getattr(module, "cached_arrays", None)
        if getattr(module, "__name__", "").startswith("pipeline.tokenizer") and callable(cached):
            def probing(kind, key, names, build, _cached=cached):
                def timed_build():
                    t0 = time.process_time()
                    try:
                        return build()
                    finally:
                        clock["probes"] += time.process_time() - t0
                return _cached(kind, key, names, timed_build)
            module.cached_arrays = probing
    for module in (bytelevel, wordpiece, sentencepiece):
        build = module._tables

        def timed_tables(*args, _build=build, **kwargs):
            t0, probed = time.process_time(), clock["probes"]
            try:
                return _build(*args, **kwargs)
            finally:
                clock["tables"] += time.process_time() - t0
                clock["table_probes"] += clock["probes"] - probed
        module._tables = timed_tables

    t0 = time.process_time()
    spec = TokenizerSpec.from_json(raw)
    backend, _ = choose_backend("auto", spec.json)
    no_cut_reason(spec.json)
    t1 = time.process_time()
    tokenizer = build_tokenizer(spec)
    if backend == "fast":
        tokenizer = FastTokenizer(tokenizer, spec.json)
    t2 = time.process_time()
    tokenizer.encode("A line to load the kernels.") if backend == "fast" else None
    t3 = time.process_time()
    json.loads = loads
    config = json.loads(raw)
    model = config["model"]
    return {"backend": backend, "imports_s": imports, "launcher_s": t1 - t0, "worker_s": t2 - t1, "numba_s": t3 - t2,
            "parse_s": clock["parse"], "parses": clock["parses"], "probes_s": clock["probes"],
            "tables_s": clock["tables"] - clock["table_probes"],
            "tokens": len(model["vocab"]), "merges": len(model.get("merges") or [])}


def _child(path: Path, cache: str | None, checkout: Path | None = None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["MASKBEAM_CACHE"] = cache
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    done = subprocess.run([sys.executable, "-P", __file__, "--one", str(path)], capture_output=True, text=True,
                          env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"{path}: the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(files: list[tuple[str, Path]], repeat: int, against: Path | None = None) -> list[dict]:
    """Each file: one process with an empty probe cache (the first on a machine), then `repeat`
    with the cache the first filled; medians of those. With `against` (another checkout), its
    processes alternate with ours, each with a probe cache of its own."""
    rows = []
    checkouts = [None] if against is None else [None, against]
    for name, path in files:
        caches = [tempfile.TemporaryDirectory(prefix="table-build-cache-") for _ in checkouts]
        try:
            firsts, runs = [], [[] for _ in checkouts]
            for checkout, cache in zip(checkouts, caches):
                _child(path, None, checkout)  # numba's kernels compiled and cached (the checkout's cache, untimed)
                firsts.append(_child(path, cache.name, checkout))
            for _ in range(repeat):
                for k, (checkout, cache) in enumerate(zip(checkouts, caches)):
                    runs[k].append(_child(path, cache.name, checkout))
        finally:
            for cache in caches:
                cache.cleanup()
        for checkout, first, done in zip(checkouts, firsts, runs):
            row = {"name": name if checkout is None else f"{name} @{checkout.name}",
                   **{k: statistics.median(r[k] for r in done) for k in done[0] if k != "backend"},
                   "backend": done[0]["backend"], "probes_first_s": first["probes_s"],
                   "launcher_first_s": first["launcher_s"], "worker_first_s": first["worker_s"]}
            rows.append(row)
            print(_line(row), flush=True)
        if against is not None:
            ours, theirs = rows[-2], rows[-1]
            print(f"{'':<34} ours / {against.name}: launcher {ours['launcher_s'] / theirs['launcher_s']:.2f}x, worker "
                  f"{ours['worker_s'] / theirs['worker_s']:.2f}x, tables "
                  f"{ours['tables_s'] / max(theirs['tables_s'], 1e-9):.2f}x", flush=True)
    return rows


def _line(row: dict) -> str:
    return (f"{row['name']:<34} {row['backend']:<4} {int(row['tokens']):>8,} tokens {int(row['merges']):>8,} merges | "
            f"launcher {row['launcher_s']:5.2f} worker {row['worker_s']:5.2f} numba {row['numba_s']:4.2f} | "
            f"parse {row['parse_s']:4.2f} ({int(row['parses'])}x) tables {row['tables_s']:4.2f} "
            f"probes {row['probes_s']:4.2f} | first process: probes {row['probes_first_s']:5.2f} "
            f"(launcher {row['launcher_first_s']:.2f} worker {row['worker_first_s']:.2f}) s CPU")


def _ratios(rows: list[dict]) -> None:
    """The table build per doubling of the vocabulary (2.0x is linear), per synthetic family."""
    for family in FAMILIES:
        curve = [r for r in rows if r["name"].startswith(family + "-") and "@" not in r["name"]]
        for small, large in zip(curve, curve[1:]):
            print(f"{family}: {int(small['tokens']):,} -> {int(large['tokens']):,} tokens: tables "
                  f"{large['tables_s'] / max(small['tables_s'], 1e-9):.2f}x, worker "
                  f"{large['worker_s'] / max(small['worker_s'], 1e-9):.2f}x, launcher "
                  f"{large['launcher_s'] / max(small['launcher_s'], 1e-9):.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="synthetic vocabulary sizes")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"synthetic families ({','.join(FAMILIES)})")
    parser.add_argument("--tokenizer", type=Path, nargs="*", default=[], help="real tokenizer.json files")
    parser.add_argument("--repeat", type=int, default=3, help="processes per file (medians)")
    parser.add_argument("--against", type=Path, help="another checkout, measured in alternate processes")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child process: one measurement
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown} (choose from {', '.join(FAMILIES)})")
    with tempfile.TemporaryDirectory(prefix="table-build-") as folder:
        files = []
        for family in families:
            for size in args.sizes:
                path = Path(folder) / f"{family}-{size}.json"
                path.write_text(MAKERS[family](size), encoding="utf-8")
                files.append((f"{family}-{size // 1000}k", path))
        files += [(path.parent.name if path.name == "tokenizer.json" else path.stem, path) for path in args.tokenizer]
        print(f"{len(files)} tokenizers, {args.repeat} processes each after one with an empty probe cache; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        rows = run(files, args.repeat, args.against)
    _ratios(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
