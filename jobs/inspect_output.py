"""Print a processed dataset's manifest summary, two decoded rows and the MLM check line.

    python -m jobs.inspect_output DIR [--split train] [--epoch N]

The check line is True when, on the rows read, every target is an ordinary token whose label is
the original token, nothing else changed, and the ratios are within tolerance of the config.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline.console.arguments import DefaultsFormatter, OneLineParser
from pipeline.console.formatting import printable
from pipeline.consumers.inspection import SAMPLE_ROWS, check_rows, decode_row, mask_statistics, read_split_rows
from pipeline.consumers.outputs import (
    BadInputsFile,
    ShardMismatch,
    input_entries,
    load_manifest,
    masking_rule,
    tokenizer_spec,
)
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas import options as o


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m jobs.inspect_output", description=__doc__.split("\n")[0],
                      formatter_class=DefaultsFormatter)
    p.add_argument("dir", help="output folder of jobs.preprocess")
    p.add_argument("--split", default=m.TRAIN, choices=m.SPLITS, help="the split to read")
    p.add_argument("--epoch", type=int, default=0, help="epoch to mask dynamic output with (default 0)")
    p.add_argument("--rows", type=int, default=2, help="rows to decode")
    p.add_argument("--sample_rows", type=int, default=SAMPLE_ROWS,
                   help=f"rows to measure, read from the start of the split (default {SAMPLE_ROWS})")
    p.add_argument("--tokenizer", help="tokenizer to decode with (default: the one in the manifest)")
    return p


def _say(*parts: object, file=None) -> None:
    """print(), with every non-printable character escaped: paths, reasons and decoded tokens come from
    files the user did not make, and an escape sequence in them must not reach the terminal."""
    print(printable(" ".join(str(p) for p in parts), keep_newlines=False), file=file or sys.stdout)


def run(argv: list[str] | None = None) -> dict:
    """Returns the statistics printed on the check line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.epoch < 0:
        parser.error(f"--epoch must be >= 0, got {args.epoch}")
    try:
        manifest = load_manifest(args.dir)
        spec = (TokenizerSpec.from_json(resolve_tokenizer_json(args.tokenizer)) if args.tokenizer
                else tokenizer_spec(args.dir, manifest))
    except (OSError, ValueError, KeyError) as error:
        parser.error(str(error))
    if spec.fingerprint != manifest[m.KEY_TOKENIZER][m.KEY_SHA256]:
        _say("warning: the tokenizer differs from the one the data was made with", file=sys.stderr)
    config = manifest[m.KEY_CONFIG]
    _say(f"{args.dir}: masking={config[o.MASKING]} max_seq_length={config[o.MAX_SEQ_LENGTH]} "
          f"seed={config[o.SEED]} tokenizer={manifest[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH]}")
    _say("counts:", json.dumps(manifest[m.KEY_COUNTS], sort_keys=True))
    for split, info in manifest[m.KEY_SPLITS].items():
        _say(f"{split}: {info[m.KEY_ROWS]} rows in {len(info[m.KEY_SHARDS])} shards")
    try:
        for section, entry in input_entries(args.dir, manifest):
            if section == m.KEY_SKIPPED:
                _say(f"skipped: {entry[m.KEY_PATH]}: {entry[m.KEY_REASON]}")
    except BadInputsFile as error:
        _say(f"inspect_output: {error}", file=sys.stderr)
        raise SystemExit(1) from None

    rule = masking_rule(manifest)
    try:
        rows = read_split_rows(args.dir, args.split, manifest, rule, args.epoch, max_rows=args.sample_rows)
    except ShardMismatch as error:
        _say(f"inspect_output: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    stats = mask_statistics(rows, rule)
    problems = check_rows(rows, rule, stats, config)
    for problem in problems:
        _say(f"check failed: {problem}", file=sys.stderr)
    for i in range(min(args.rows, rows.ids.shape[0])):
        _say(f"row {i}: {decode_row(rows, i, spec)}")
    _say(f"selected={stats['selected']} of {stats['eligible']} eligible tokens in {rows.ids.shape[0]} rows; legend: "
          "[MASK]<original> random>random<original> =original (unchanged target)")
    _say(round(stats["selected_ratio"], 2), round(stats["mask_ratio"], 2), round(stats["random_ratio"], 2),
          round(stats["unchanged_ratio"], 2))
    _say(not problems)
    stats["ok"] = not problems
    return stats


def main(argv: list[str] | None = None) -> None:
    run(argv)


if __name__ == "__main__":
    main()
