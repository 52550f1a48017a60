"""Byte-level BPE alone, one thread, on text read once: ours against `fastokens` and `snaptokens`
(the fastest exact peers) and HF's `encode_batch_fast`, cold (the first pass of a fresh tokenizer
over the books) and warm (the second pass of the same tokenizer), in CPU seconds of this process.

    python -m benchmarks.bytelevel_profile --corpus DIR [--tokenizers DIR] [--repeat 3] [--make]
    python -m benchmarks.bytelevel_profile --corpus DIR --real qwen,qwen3_6 [--repeat 3]

`--real` measures the real vocabularies of `benchmarks.real_tokenizers` (MLM specials added) instead
of the trained ones, and adds `maskbeam_program`: ours with the pattern's Split run on the compiled
matcher (`regex_program`, what a Split without a written-out scanner runs; main before Qwen's
scanner), the same tables otherwise, so the two differ only in the pre-tokenizer.

`--make` trains the two tokenizers measured (RoBERTa-style: ByteLevel, 50,265 tokens; Llama-3-style:
the cl100k Split + regex-less ByteLevel with `ignore_merges`, 128,000 tokens) on the corpus into
`--tokenizers` (a minute each, once). Each repeat makes every method afresh (an empty word cache)
and runs it twice over the books, the methods interleaved so that machine noise hits each alike;
the figures are medians of the repeats, ours / peer the median of each repeat's paired ratio.
Every document's ids of every method are compared with HF `tokenizers` before any time counts
(the peers refuse a `RobertaProcessing` post-processor: it is set to null, which changes no id
without special tokens).
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from benchmarks.corpus import corpus_files  # noqa: E402
from pipeline.kernels.text.cleaning import NotText, clean_bytes  # noqa: E402
from pipeline.kernels.tokenizer.bytelevel.encode import LLAMA3_PATTERN  # noqa: E402
from pipeline.kernels.tokenizer.bytelevel.regex_program import PROGRAM  # noqa: E402
from pipeline.tokenizer.bytelevel.fast import ByteLevelFastTokenizer  # noqa: E402
from pipeline.tokenizer.bytelevel.split_program import compile_chain  # noqa: E402

NAMES = ("roberta_style", "llama3_style")


def _documents(corpus: Path) -> list[str]:
    texts = []
    for path in corpus_files(corpus):
        try:
            texts.append(clean_bytes(path.read_bytes()).text)
        except NotText:
            continue
    return texts


def make_tokenizers(texts: list[str], folder: Path) -> None:
    """Trains the RoBERTa-style and Llama-3-style tokenizers on `texts` into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shapes = {
        "roberta_style": (pre_tokenizers.ByteLevel(add_prefix_space=False), 50265, {}),
        "llama3_style": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 128000, {"ignore_merges": True}),
    }
    for name, (pre, size, options) in shapes.items():
        tokenizer = Tokenizer(models.BPE(**options))
        tokenizer.pre_tokenizer = pre
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                      show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(texts, trainer)
        (folder / f"{name}.json").write_text(tokenizer.to_str())


def _methods(tokenizer_json: str, program: bool = False) -> dict:
    """name -> factory of a fresh encoder (text -> int array); `program`: also ours on the compiled
    matcher (`maskbeam_program`) and HF's `encode_batch_fast` (`hf`)."""
    real = Tokenizer.from_str(tokenizer_json)
    real.encode_special_tokens = True

    def ours():
        fast = ByteLevelFastTokenizer(real, tokenizer_json)
        return fast.encode

    methods = {"maskbeam": ours}
    config = json.loads(tokenizer_json)
    if program:
        splits = config["pre_tokenizer"]["pretokenizers"][:-1]
        arrays = compile_chain(splits).arrays

        def ours_program():
            fast = ByteLevelFastTokenizer(real, tokenizer_json)
            fast.tables = dataclasses.replace(fast.tables, pattern=PROGRAM, program=arrays)
            return fast.encode

        def hf():
            return lambda text: np.asarray(real.encode_batch_fast([text], add_special_tokens=False)[0].ids)

        methods["maskbeam_program"] = ours_program
        methods["hf"] = hf
    config["post_processor"] = None
    peer_json = json.dumps(config)
    try:
        import fastokens

        def fast_peer():
            peer = fastokens.Tokenizer.from_json_str(peer_json)
            return lambda text: np.frombuffer(peer.encode_batch_flat([text])[0], dtype=np.uint32)

        methods["fastokens"] = fast_peer
    except ImportError:
        pass
    try:
        import snaptokens

        def snap_peer():
            peer = snaptokens.Tokenizer.from_json_str(peer_json)
            return lambda text: np.frombuffer(peer.encode_batch_flat([text])[0], dtype=np.uint32)

        methods["snaptokens"] = snap_peer
    except ImportError:
        pass
    return methods


def measure(tokenizer_json: str, texts: list[str], repeat: int, program: bool = False) -> dict:
    real = Tokenizer.from_str(tokenizer_json)
    real.encode_special_tokens = True
    expected = [np.asarray(e.ids, dtype=np.int64) for e in real.encode_batch_fast(texts, add_special_tokens=False)]
    methods = _methods(tokenizer_json, program)
    for name, factory in methods.items():
        encode = factory()
        bad = [i for i, (text, want) in enumerate(zip(texts, expected))
               if not np.array_equal(encode(text).astype(np.int64), want)]
        if bad:
            raise SystemExit(f"{name}: ids differ from HF's on {len(bad)} of {len(texts)} documents (first {bad[0]})")
    n_mb = sum(len(t.encode()) for t in texts) / 1e6
    rates: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": []} for name in methods}
    for _ in range(repeat):
        for name, factory in methods.items():
            encode = factory()
            for phase in ("cold", "warm"):
                started = time.process_time()
                for text in texts:
                    encode(text)
                rates[name][phase].append(n_mb / (time.process_time() - started))
    summary = {name: {phase: statistics.median(r) for phase, r in phases.items()} for name, phases in rates.items()}
    ratios = {peer: {phase: statistics.median(o / p for o, p in zip(rates["maskbeam"][phase], rates[peer][phase]))
                     for phase in ("cold", "warm")} for peer in methods if peer != "maskbeam"}
    return {"mb": n_mb, "mb_per_s": summary, "maskbeam_vs": ratios, "runs": rates}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizers", default="/tmp/bytelevel_tokenizers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--make", action="store_true")
    parser.add_argument("--only", choices=NAMES)
    parser.add_argument("--real", default="", help="comma-separated real tokenizers of benchmarks.real_tokenizers "
                        "(qwen, qwen3_6, deepseek_v4, ...) instead of the trained ones")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    texts = _documents(Path(args.corpus))
    folder = Path(args.tokenizers)
    if args.make:
        make_tokenizers(texts, folder)
    report = {}
    real_names = [n for n in args.real.split(",") if n]
    for name in real_names or (NAMES if args.only is None else (args.only,)):
        if real_names:
            from benchmarks.real_tokenizers import REAL, VARIANTS, with_mlm_specials

            started = time.process_time()
            tokenizer_json = with_mlm_specials({**REAL, **VARIANTS}[name]())
            print(f"{name}: converted in {time.process_time() - started:.1f} CPU s", flush=True)
        else:
            tokenizer_json = (folder / f"{name}.json").read_text()
        report[name] = measure(tokenizer_json, texts, args.repeat, program=bool(real_names))
        for method, phases in report[name]["mb_per_s"].items():
            print(f"{name:14s} {method:10s} cold {phases['cold']:7.1f} MB/s  warm {phases['warm']:7.1f} MB/s")
        for peer, phases in report[name]["maskbeam_vs"].items():
            print(f"{name:14s} maskbeam / {peer}: cold {phases['cold']:.2f}  warm {phases['warm']:.2f}")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
