"""`maskbeam JOB [options]`: one console script for every job (`maskbeam preprocess --help`)."""

from __future__ import annotations

import importlib
import sys

JOBS = ("preprocess", "inspect", "validate", "train", "publish", "report", "train_tokenizer")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help") or args[0].replace("-", "_") not in JOBS:
        print(f"usage: maskbeam {{{','.join(JOBS)}}} [options]\n\nRun `maskbeam JOB --help` for a job's options.",
              file=sys.stderr if args and args[0] not in ("-h", "--help") else sys.stdout)
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else 2)
    job = importlib.import_module(f"jobs.{args[0].replace('-', '_')}")
    sys.argv = [f"maskbeam {args[0]}", *args[1:]]
    job.main(args[1:])  # the job's own entry point: its logging, exit code and Ctrl-C handling


if __name__ == "__main__":
    main()
