"""`maskbeam JOB [options]`: one console script for every job (`maskbeam preprocess --help`)."""

from __future__ import annotations

import difflib
import importlib
import sys

from pipeline.console.formatting import printable

JOBS = ("preprocess", "inspect", "validate", "train", "publish", "report", "train_tokenizer")
MODULES = {"inspect": "inspect_output"}  # job name -> module in jobs/, where they differ


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    usage = f"usage: maskbeam {{{','.join(JOBS)}}} [options]"
    if not args or args[0] in ("-h", "--help"):
        print(f"{usage}\n\nRun `maskbeam JOB --help` for a job's options.", file=sys.stdout if args else sys.stderr)
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


if __name__ == "__main__":
    main()
