"""Check every shard of a processed output against its manifest.

    python -m jobs.validate DIR

Exit 0 with a one-line summary, or 1 naming the first bad shard and what is wrong.
"""

from __future__ import annotations

import sys

from pipeline.console.arguments import DefaultsFormatter, OneLineParser
from pipeline.consumers.validation import ValidationError, validate_output


def run(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m jobs.validate", description=__doc__.split("\n")[0],
                           formatter_class=DefaultsFormatter)
    parser.add_argument("dir", help="output folder of jobs.preprocess")
    args = parser.parse_args(argv)
    try:
        summary = validate_output(args.dir)
    except ValidationError as error:
        print(f"INVALID: {error}", file=sys.stderr)
        return 1
    splits = ", ".join(f"{k} {v['rows']} rows (selected {v['selected_ratio']:.4f})" for k, v in summary.items()
                       if isinstance(v, dict))
    print(f"OK: {args.dir}: {summary['shards']} shards, {summary['rows']} rows; {splits}")
    return 0


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
