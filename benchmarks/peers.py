"""Tokenization alone, one thread, cold and warm, against every peer: ids checked on every document.

    python -m benchmarks.peers --corpus DIR [--tokenizer PATH ...] [--real deepseek_v4,qwen,qwen3_6]
        [--repeat 3] [--methods ours,tokie,...] [--json FILE] [--markdown FILE]

Each method runs in a fresh process of its own, pinned to one core, with one thread (RAYON_NUM_THREADS=1),
on the corpus' documents (each text file cleaned as the job cleans it, whole, one call a document, ids
as an array). It is built (load, not counted), encodes one short line (kernels and lazy set-up, not
counted), then reads every document once (**cold**: the first pass, its caches empty) and a second time
(**warm**: the same text again, its caches full), each pass timed by the process' CPU clock. Its ids of
both passes are then compared with HF's `encode(add_special_tokens=False)` on every document; a method
whose ids differ anywhere is reported as such (with the first document that differs) and its speed is
not quoted. Methods run interleaved, `--repeat` rounds, order rotated each round: medians and ranges.

`ours` is what a job with `--tokenizer_backend auto` runs: the fast family where it covers the
tokenizer, else the real tokenizer with the job's cuts (the table says which, `(fast)` or `(hf)`).
`--real` adds the real 129k-248k vocabularies (`benchmarks.real_tokenizers`, MLM specials added).

HF (`encode_batch_fast`, no cache) runs once on every document, giving the reference ids and its
rate. The peers, from PyPI (`pip install -e .[bench]`): `tokie`, `fastokens`, `snaptokens`, `splintr`
(`splintr-rs`), each through its flat batch API (one id buffer, no per-token Python objects).
`fastokens` and `snaptokens` refuse a `RobertaProcessing` post-processor: they get the file with it
set to null (no id changes without special tokens). `splintr` returns model-ready ids: its template's
tokens are cut off. A peer that refuses a tokenizer is listed with its reason.

Never time repeated text: give `--corpus` the shared books (read once a pass) or a folder from
`benchmarks.generate_corpus`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.generate_corpus import book_texts

TEST_TOKENIZERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
SHARED_BERT = Path(__file__).resolve().parent.parent.parent / "shared" / "tokenizers" / "bert-base-uncased"
DEFAULT_TOKENIZERS = (str(SHARED_BERT), str(TEST_TOKENIZERS / "roberta.json"), str(TEST_TOKENIZERS / "llama3.json"),
                      str(TEST_TOKENIZERS / "xlmr_unigram"), str(TEST_TOKENIZERS / "nmt_nfkc_unigram"))
METHODS = ("ours", "tokie", "fastokens", "snaptokens", "splintr")
WARM_UP = "A line to load the kernels."
ONE_THREAD = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "NUMBA_NUM_THREADS": "1",
              "OMP_NUM_THREADS": "1"}


class Refused(Exception):
    """A method that cannot load or encode this tokenizer."""


def tokenizer_file(path: str) -> Path:
    file = Path(path)
    return file / "tokenizer.json" if file.is_dir() else file


def _without_post_processor(tokenizer_json: str) -> str:
    config = json.loads(tokenizer_json)
    config["post_processor"] = None
    return json.dumps(config)


def build(method: str, path: str):
    """A function text -> ids (np.ndarray) of `method` for the tokenizer at `path`, content ids only.

    Raises:
        Refused: the method does not load or encode this tokenizer (its reason in the message).
    """
    file = tokenizer_file(path)
    tokenizer_json = file.read_text(encoding="utf-8")
    try:
        if method == "hf":
            from tokenizers import Tokenizer

            from pipeline.tokenizer.resolve import resolve_tokenizer_json

            real = Tokenizer.from_str(resolve_tokenizer_json(path))
            real.encode_special_tokens = True
            return lambda text: np.asarray(real.encode_batch_fast([text], add_special_tokens=False)[0].ids)
        if method == "ours":
            from tokenizers import Tokenizer

            from pipeline.tokenizer.encode import tokenize_text
            from pipeline.tokenizer.fast import FastTokenizer, choose_backend
            from pipeline.tokenizer.resolve import resolve_tokenizer_json

            content = resolve_tokenizer_json(path)
            real = Tokenizer.from_str(content)
            real.encode_special_tokens = True
            backend, _ = choose_backend("auto", content)  # as a job's --tokenizer_backend auto
            ours = FastTokenizer(real, content) if backend == "fast" else real

            def encode_ours(text: str) -> np.ndarray:
                return tokenize_text(ours, text)

            encode_ours.backend = backend
            return encode_ours
        if method == "tokie":
            import tokie

            peer = tokie.Tokenizer.from_json(str(file))
            return lambda text: peer.encode_batch_flat([text], add_special_tokens=False)[0]
        if method in ("fastokens", "snaptokens"):
            module = __import__(method)
            peer = module.Tokenizer.from_json_str(_without_post_processor(tokenizer_json))
            return lambda text: np.frombuffer(peer.encode_batch_flat([text])[0], np.uint32)
        if method == "splintr":
            import splintr

            peer = splintr.from_json(str(file))
            probe = "Probe the template, 12 words."
            flat, raw = np.frombuffer(peer.encode_flat(probe), np.uint32), peer.encode_raw(probe)
            lead = next(i for i in range(len(flat) - len(raw) + 1) if flat[i:i + len(raw)].tolist() == raw)
            end = -(len(flat) - lead - len(raw)) or None
            return lambda text: np.frombuffer(peer.encode_flat(text), np.uint32)[lead:end]
    except ImportError as missing:
        raise Refused(f"not installed ({missing.name}: pip install -e .[bench])") from missing
    except Exception as failed:  # a peer's own refusal, of whatever type it raises
        raise Refused(str(failed).strip().splitlines()[0][:160] or type(failed).__name__) from failed
    raise ValueError(f"unknown method {method!r}; choose from hf, {', '.join(METHODS)}")


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[os.getpid() % len(cores)]})


def _read_docs(folder: Path) -> list[str]:
    index = json.loads((folder / "docs.json").read_text())
    data = (folder / "docs.bin").read_bytes()
    return [data[a:b].decode("utf-8") for a, b in zip(index[:-1], index[1:])]


def worker(method: str, path: str, folder: Path) -> dict:
    """One method in this (fresh) process: load, warm-up line, cold pass, warm pass, ids checked."""
    _pin_one_core()
    docs = _read_docs(folder)
    n_bytes = sum(len(d.encode()) for d in docs)
    clock = time.process_time
    started = clock()
    try:
        encode = build(method, path)
        encode(WARM_UP)
    except Refused as refused:
        return {"method": method, "refused": str(refused)}
    loaded = clock() - started
    backend = getattr(encode, "backend", None)  # ours: the backend `auto` picked
    passes, seconds = [], []
    for _ in range(1 if method == "hf" else 2):
        started = clock()
        out = [encode(doc) for doc in docs]
        seconds.append(clock() - started)
        passes.append(out)
    result = {"method": method, "bytes": n_bytes, "load_s": loaded, "cold_s": seconds[0],
              "warm_s": seconds[-1] if len(seconds) > 1 else None, **({"backend": backend} if backend else {})}
    flat = [np.concatenate([np.asarray(ids, dtype=np.int64) for ids in out]) if out else np.zeros(0) for out in passes]
    if method == "hf":
        np.save(folder / "reference.npy", flat[0].astype(np.int32))
        np.save(folder / "reference_offsets.npy", np.cumsum([0] + [len(ids) for ids in passes[0]]))
        result["tokens"] = int(len(flat[0]))
        return result
    want = np.load(folder / "reference.npy")
    offsets = np.load(folder / "reference_offsets.npy")
    for name, out in zip(("cold", "warm"), passes):
        for d, ids in enumerate(out):
            if not np.array_equal(np.asarray(ids, dtype=np.int64), want[offsets[d]:offsets[d + 1]]):
                result["inexact"] = f"{name} pass: ids differ from HF's on document {d} of {len(docs)}"
                return result
    result["tokens"] = int(len(want))
    return result


def _run_worker(method: str, path: str, folder: Path) -> dict:
    env = {**os.environ, **ONE_THREAD}
    done = subprocess.run([sys.executable, "-m", "benchmarks.peers", "--worker", method, "--tokenizer", path,
                           "--docs", str(folder)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"method": method, "refused": f"crashed: {tail[0][:160]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_docs(corpus: Path, folder: Path) -> tuple[int, int]:
    """The corpus' cleaned documents into `folder` (docs.bin and its offsets); (documents, bytes).

    Raises:
        ValueError: no text in `corpus`.
    """
    offsets, size = [0], 0
    with open(folder / "docs.bin", "wb") as out:
        for text in book_texts(corpus):
            data = text.encode("utf-8")
            out.write(data)
            size += len(data)
            offsets.append(size)
    if size == 0:
        raise ValueError(f"{corpus}: no text documents to tokenize")
    (folder / "docs.json").write_text(json.dumps(offsets))
    return len(offsets) - 1, size


def _rate(n_bytes: int, seconds: float | None) -> float | None:
    return None if not seconds else n_bytes / 1e6 / seconds


def measure(path: str, folder: Path, methods: list[str], repeat: int) -> dict:
    """Every method on one tokenizer, interleaved; medians (MB/s) of cold and warm, with ranges."""
    hf = _run_worker("hf", path, folder)
    if "refused" in hf:
        raise RuntimeError(f"{path}: HF's own tokenizer failed: {hf['refused']}")
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for r in range(repeat):
        for method in methods[r % len(methods):] + methods[:r % len(methods)]:
            if runs[method] and ("refused" in runs[method][0] or "inexact" in runs[method][0]):
                continue  # refused or inexact once: not run again
            runs[method].append(_run_worker(method, path, folder))
    summary = {"tokenizer": path, "mb": hf["bytes"] / 1e6, "tokens": hf["tokens"],
               "hf": {"cold": _rate(hf["bytes"], hf["cold_s"]), "load_s": hf["load_s"]}, "methods": {}}
    for method, results in runs.items():
        first = results[0]
        if "refused" in first or "inexact" in first:
            summary["methods"][method] = {k: v for k, v in first.items() if k in ("refused", "inexact")}
            continue
        entry = {}
        for which in ("cold", "warm"):
            rates = [_rate(x["bytes"], x[f"{which}_s"]) for x in results]
            entry[which] = statistics.median(rates)
            entry[f"{which}_range"] = (min(rates), max(rates))
        entry["load_s"] = statistics.median(x["load_s"] for x in results)
        if "backend" in first:
            entry["backend"] = first["backend"]
        entry["runs"] = len(results)
        summary["methods"][method] = entry
    return summary


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def markdown_table(results: list[dict], methods: list[str]) -> str:
    """tokenizer x {HF, each method warm / cold}, the fastest exact peer and ours against it."""
    lines = ["| tokenizer | HF `encode_batch_fast` | " + " | ".join(f"`{m}` warm / cold" if m != "ours" else
                                                              "**ours** warm / cold" for m in methods)
             + " | fastest exact peer (warm; cold) | ours / it, warm; cold | ours / HF, cold |",
             "|---|---|" + "---|" * (len(methods) + 3)]
    for r in results:
        cells = []
        for m in methods:
            e = r["methods"][m]
            cells.append("refused" if "refused" in e else "ids differ" if "inexact" in e
                         else f"{_fmt(e['warm'])} / {_fmt(e['cold'])}" + (f" ({e['backend']})" if e.get("backend")
                                                                          else ""))
        peers = {m: e for m, e in r["methods"].items() if m != "ours" and "cold" in e}
        ours = r["methods"].get("ours", {})
        best_warm = max(peers, key=lambda m: peers[m]["warm"], default=None)
        best_cold = max(peers, key=lambda m: peers[m]["cold"], default=None)
        if best_warm and "cold" in ours:
            best = f"`{best_warm}`; `{best_cold}`"
            vs = f"{ours['warm'] / peers[best_warm]['warm']:.2f}x; {ours['cold'] / peers[best_cold]['cold']:.2f}x"
        else:
            best, vs = "-", "-"
        vs_hf = f"{ours['cold'] / r['hf']['cold']:.1f}x" if "cold" in ours else "-"
        lines.append(f"| {Path(r['tokenizer']).name} | {_fmt(r['hf']['cold'])} | " + " | ".join(cells)
                     + f" | {best} | {vs} | {vs_hf} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="folder of text files (the shared books, or benchmarks.generate_corpus')")
    parser.add_argument("--tokenizer", action="append",
                        help="tokenizer file or folder, repeatable (default: bert-base-uncased and the test "
                        "tokenizers of every family)")
    parser.add_argument("--real", default="",
                        help="comma-separated real tokenizers from benchmarks.real_tokenizers (deepseek_v4, qwen, "
                        "qwen3_6), converted into a scratch folder and measured after --tokenizer's")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated (default {','.join(METHODS)})")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.tokenizer[0], Path(args.docs))))
        return []
    if not args.corpus:
        parser.error("--corpus is required")
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or args.repeat < 1:
        parser.error(f"unknown methods {unknown} (choose from {', '.join(METHODS)})" if unknown
                     else "--repeat must be >= 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="maskbeam-peers-") as scratch:
        folder = Path(scratch)
        n_docs, n_bytes = write_docs(Path(args.corpus), folder)
        print(f"{n_docs} documents, {n_bytes / 1e6:.1f} MB, one thread, CPU time; warm = the same text a "
              "second time", flush=True)
        paths = list(args.tokenizer or ([] if args.real else DEFAULT_TOKENIZERS))
        if args.real:
            from benchmarks.real_tokenizers import main as convert

            paths += [str(p.parent) for p in convert(["--output", str(folder / "real"), "--only", args.real])]
        for path in paths:
            r = measure(path, folder, methods, args.repeat)
            results.append(r)
            parts = [f"HF {_fmt(r['hf']['cold'])}"]
            for m, e in r["methods"].items():
                parts.append(f"{m} " + (f"refused ({e['refused']})" if "refused" in e else
                                        f"ids differ ({e['inexact']})" if "inexact" in e else
                                        f"{_fmt(e['warm'])} / {_fmt(e['cold'])}"))
            print(f"{Path(path).name:20} MB/s warm / cold: " + ", ".join(parts), flush=True)
    table = markdown_table(results, methods)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"corpus": args.corpus, "repeat": args.repeat, "results": results},
                                              indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
