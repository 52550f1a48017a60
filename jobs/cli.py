"""`maskbeam JOB [options]`: one console script for every job (`maskbeam preprocess --help`)."""

from __future__ import annotations

import difflib
import importlib
import sys

from pipeline.console.formatting import printable

# Each job with its line in `maskbeam --help`, in the order of a run from books to a shared dataset.
DESCRIPTIONS = {
    "train_tokenizer": "train a WordPiece or byte-level BPE tokenizer on your books (optional)",
    "preprocess": "books (text, .jsonl, .parquet, a Hub dataset) to masked-LM Arrow shards and a manifest",
    "inspect": "print an output's summary, decoded rows and the masking check",
    "validate": "check every shard of an output against its manifest",
    "report": "a one-page HTML report of an output, with its PNG plots",
    "train": "train a masked-LM model on an output (one device, or data-parallel)",
    "publish": "upload an output to the Hugging Face Hub (or build the upload folder with --dry_run)",
}
JOBS = tuple(DESCRIPTIONS)
MODULES = {"inspect": "inspect_output"}  # job name -> module in jobs/, where they differ


def help_text() -> str:
    """`maskbeam --help`: the usage line, then one line on each job."""
    width = max(map(len, JOBS))
    lines = [f"  {job:<{width}}  {text}" for job, text in DESCRIPTIONS.items()]
    return ("usage: maskbeam JOB [options]\n\njobs:\n" + "\n".join(lines)
            + "\n\nRun `maskbeam JOB --help` for a job's options.")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(help_text(), file=sys.stdout if args else sys.stderr)
        raise SystemExit(0 if args else 2)
    if args[0].replace("-", "_") not in JOBS:
        close = difflib.get_close_matches(args[0].replace("-", "_"), JOBS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"maskbeam: error: unknown job {printable(args[0], keep_newlines=False)!r}; {hint}jobs: "
              f"{', '.join(JOBS)} (`maskbeam JOB --help` for a job's options)", file=sys.stderr)
        raise SystemExit(2)
    name = args[0].replace("-", "_")
    job = importlib.import_module(f"jobs.{MODULES.get(name, name)}")
    sys.argv = [f"maskbeam {args[0]}", *args[1:]]
    job.main(args[1:])  # the job's own entry point: its logging, exit code and Ctrl-C handling


def console() -> None:
    """The `maskbeam` console script: `main()`, and for `preprocess` without the interpreter's
    teardown, as `python -m jobs.preprocess` ends (`jobs.preprocess.exit_without_teardown`)."""
    if sys.argv[1:2] == ["preprocess"]:
        from jobs.preprocess import exit_without_teardown

        exit_without_teardown(main)
    main()


if __name__ == "__main__":
    console()
