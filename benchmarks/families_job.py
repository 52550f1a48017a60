"""The job end to end against the bare tokenizer, for every tokenizer family, on all cores; with
`--one_thread`, tokenization alone on one thread too (HF, tokie, ours): the issue's table.

    python -m benchmarks.families_job --corpus DIR [--generated_mb N] [--scale N] [--limit_scale N] [--repeat N]
        [--tokenizer PATH ...] [--one_thread] [--one_thread_repeat N] [--json FILE] [--markdown FILE]

`--generated_mb N`: the job and the limit run on N MB of distinct text from `benchmarks.generate_corpus`
(fitted on `--corpus`), so no text is read twice. `--scale N > 1` repeats the corpus (copies): the
tokenizers' caches then see text again, which a real corpus does not; a figure from it must say so.

For each tokenizer, interleaved: the limit (`tokenizers.encode_batch` over the corpus' paragraphs,
all cores, the encode loop alone timed) and `jobs.preprocess --tokenizer_backend fast` (the whole
job: interpreter, Beam, read, clean, tokenize, chunk, mask, write, wall clock). The limit keeps
nothing between calls, so its MB/s does not depend on the corpus size: it runs on the corpus
scaled `--limit_scale` times (default 1) while the job runs on `--scale` copies, as the issue's
scaled corpus asks. Prints one line per tokenizer and the ratio job / limit.

`--one_thread` adds, per tokenizer, `benchmarks.tokenize --unit documents` on the same corpus
`--scale` times over in memory (whole cleaned books, one thread: HF `encode_batch_fast` on its
first megabyte, `tokie` `encode_batch_flat` where its ids equal HF's, ours), and `--markdown` writes
the table family x {HF, tokie, ours} x {one thread, job}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus import corpus_bytes, scaled_corpus
from benchmarks.procmon import run_measured
from benchmarks.run import _step_limit, _step_ours

TEST_TOKENIZERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
DEFAULT_TOKENIZERS = ("roberta.json", "llama3.json", "xlmr_unigram", "t5_unigram", "nmt_nfkc_unigram", "llama_bpe")


def measure(corpus: Path, limit_corpus: Path, tokenizer: str, repeat: int, work: Path) -> dict:
    """Medians of `repeat` interleaved runs of the limit and the job on one tokenizer."""
    n_bytes, limit_bytes = corpus_bytes(corpus), corpus_bytes(limit_corpus)
    limit, ours = [], []
    for _ in range(repeat):
        limit.append(limit_bytes / 1e6 / _step_limit(limit_corpus, tokenizer, "encode_batch")["wall_s"])
        ours.append(n_bytes / 1e6 / _step_ours(corpus, tokenizer, work, "--tokenizer_backend", "fast")["wall_s"])
    return {"tokenizer": tokenizer, "job_mb": n_bytes / 1e6, "limit_mb": limit_bytes / 1e6,
            "limit_mb_per_s": statistics.median(limit), "ours_mb_per_s": statistics.median(ours),
            "limit_runs": limit, "ours_runs": ours,
            "ratio": statistics.median(ours) / statistics.median(limit)}


def one_thread(corpus: Path, tokenizer: str, scale: int, repeat: int) -> dict:
    """`benchmarks.tokenize --unit documents` on one tokenizer: MB/s (median) per method."""
    measured = run_measured([sys.executable, "-m", "benchmarks.tokenize", "--corpus", str(corpus), "--tokenizer",
                             tokenizer, "--unit", "documents", "--scale", str(scale), "--hf_mb", "1",
                             "--repeat", str(repeat)])
    report = json.loads(measured.stdout.strip().splitlines()[-1])
    rates = report["mb_per_s"]
    return {"hf": rates["hf encode_batch_fast"][0], "tokie": rates.get("tokie encode_batch_flat", [None])[0],
            "ours": rates["maskbeam fast"][0], "tokie_inexact": "tokie encode_batch_flat" in report["inexact"],
            "corpus_mb": report["corpus_mb"]}


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown_table(results: list[dict]) -> str:
    """family x {HF, tokie, ours} x {one thread, job}, with the ratios the issue's targets name."""
    lines = ["| tokenizer | one thread: HF `encode_batch_fast` | `tokie` flat | ours | ours / HF | ours / `tokie` "
             "| all cores: HF `encode_batch` | the job | job / HF |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        t = r.get("one_thread") or {}
        tokie = "ids differ" if t.get("tokie_inexact") else _cell(t.get("tokie"))
        ours_hf = t["ours"] / t["hf"] if t else None
        ours_tokie = t["ours"] / t["tokie"] if t and t.get("tokie") and not t.get("tokie_inexact") else None
        job = (f"refused: {r['refused']}" if "refused" in r else _cell(r["ours_mb_per_s"]))
        lines.append(f"| {Path(r['tokenizer']).name} | {_cell(t.get('hf'))} | {tokie} | {_cell(t.get('ours'), 1)} | "
                     f"{_ratio(ours_hf)} | {_ratio(ours_tokie)} | {_cell(r.get('limit_mb_per_s'))} | {job} | "
                     f"{_ratio(r.get('ratio'))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.families_job", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="folder of .txt books")
    parser.add_argument("--generated_mb", type=float,
                        help="run on this many MB of generated distinct text (fitted on --corpus) instead")
    parser.add_argument("--scale", type=int, default=1,
                        help="the job's corpus: N copies (default 1; N > 1 repeats text: say so beside the figure)")
    parser.add_argument("--limit_scale", type=int, default=1, help="the limit's corpus: N copies (default 1)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--tokenizer", action="append",
                        help="tokenizer file or folder, repeatable (default: the test tokenizers of every family)")
    parser.add_argument("--one_thread", action="store_true",
                        help="also time tokenization alone on one thread (HF, tokie, ours) on the --scale corpus")
    parser.add_argument("--one_thread_repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--markdown", help="write the table (family x {HF, tokie, ours} x {one thread, job}) here")
    args = parser.parse_args(argv)
    if min(args.scale, args.limit_scale, args.repeat) < 1:
        parser.error("--scale, --limit_scale and --repeat must be >= 1")
    tokenizers = args.tokenizer or [str(TEST_TOKENIZERS / name) for name in DEFAULT_TOKENIZERS]
    with tempfile.TemporaryDirectory(prefix="maskbeam-families-") as scratch:
        work = Path(scratch)
        base = Path(args.corpus)
        if args.generated_mb:
            from benchmarks.generate_corpus import generate, learn

            base = work / "generated"
            generate(learn(Path(args.corpus)), base, args.generated_mb)
        if args.scale > 1 or args.limit_scale > 1:
            print(f"note: --scale {args.scale} / --limit_scale {args.limit_scale} repeat the text: caches see it "
                  "again (a real corpus does not); quote these figures as measured on repeated text", flush=True)
        corpus = scaled_corpus(base, args.scale, work / "corpus")
        limit_corpus = scaled_corpus(base, args.limit_scale, work / "limit_corpus")
        results = []
        for tokenizer in tokenizers:
            alone = one_thread(base, tokenizer, args.scale, args.one_thread_repeat) if args.one_thread else None
            if alone:
                print(f"{Path(tokenizer).name:24} one thread: HF {alone['hf']:.2f} MB/s, tokie "
                      f"{'ids differ' if alone['tokie_inexact'] else _cell(alone['tokie'])}, ours {alone['ours']:.1f} "
                      f"({alone['corpus_mb']:.0f} MB)", flush=True)
            try:
                r = measure(corpus, limit_corpus, tokenizer, args.repeat, work)
            except RuntimeError as failed:  # the job refused this tokenizer: say why, go on with the others
                reason = str(failed).strip().splitlines()[-1]
                reason = reason.split(": error: ", 1)[-1].removesuffix(" (--help lists every option)")
                results.append({"tokenizer": tokenizer, "refused": reason, "one_thread": alone})
                print(f"{Path(tokenizer).name:24} the job refused it: {reason}", flush=True)
                continue
            r["one_thread"] = alone
            results.append(r)
            print(f"{Path(tokenizer).name:24} limit encode_batch {r['limit_mb_per_s']:6.2f} MB/s "
                  f"({r['limit_mb']:.1f} MB) | job {r['ours_mb_per_s']:6.2f} MB/s ({r['job_mb']:.1f} MB) | "
                  f"job / limit {r['ratio']:5.2f}x", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(results))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
