"""Train a tokenizer on the same cleaned text the preprocess job reads.

    python -m jobs.train_tokenizer --input PATTERN [--input ...] --vocab_size 30522 --output DIR
        [--kind wordpiece|bpe] [--cased] [--overwrite]

The inputs are listed, read and skipped as preprocess does (the same reasons, in the same summary);
a non-empty --output is refused unless --overwrite replaces an earlier output of this job.
"""

from __future__ import annotations

import logging
import os
import time

from pipeline.console import human_bytes, human_seconds, setup_logging, stderr_is_terminal
from pipeline.console.arguments import DefaultsFormatter, OneLineParser
from pipeline.console.formatting import plural
from pipeline.console.preflight import missing_local_input
from schemas.options import TOKENIZER_KINDS

_log = logging.getLogger("maskbeam.train_tokenizer")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m jobs.train_tokenizer", description=__doc__.split("\n")[0],
                      formatter_class=DefaultsFormatter)
    p.add_argument("--input", action="append", required=True, metavar="PATTERN",
                   help="file, directory (recursive) or glob, as preprocess reads them; repeatable (required)")
    p.add_argument("--output", required=True,
                   help="local folder for tokenizer.json and its configs (required; refused if it holds anything, "
                        "unless --overwrite replaces an earlier output of this job)")
    p.add_argument("--vocab_size", type=int, default=30522, help="ids of the trained vocabulary, specials included")
    p.add_argument("--kind", choices=TOKENIZER_KINDS, default="wordpiece", help="wordpiece (BERT) or byte-level bpe")
    p.add_argument("--cased", action="store_true", help="keep case (default: lowercase, as bert-base-uncased)")
    p.add_argument("--min_frequency", type=int, default=2, help="fewest occurrences a merge or word piece needs")
    p.add_argument("--text_column", default="text", help="text field of .jsonl/.parquet rows")
    p.add_argument("--keep_boilerplate", action="store_true",
                   help="keep Project Gutenberg header and licence (default: cut)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier train_tokenizer output in --output (default: refuse)")
    return p


def run(argv: list[str] | None = None) -> str:
    """Check the options and the output folder, train, and save; returns the output folder."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.vocab_size < 100:
        parser.error(f"--vocab_size must be >= 100, got {args.vocab_size}")
    missing = [problem for problem in map(missing_local_input, args.input) if problem]
    if missing:
        parser.error(missing[0])
    from pipeline.tokenizer.trained_output import check_tokenizer_output

    output = args.output.rstrip("/") or "/"
    try:
        earlier = check_tokenizer_output(output, args.overwrite)
    except FileExistsError as error:
        parser.error(str(error))
    from pipeline.beam.reading.work_units import InputError  # Beam: once the command line is checked

    try:
        listed = _list_inputs(args.input, output)
    except InputError as error:
        parser.error(str(error))
    return _train(parser, args, output, listed, earlier)


def _list_inputs(patterns: list[str], output: str):
    from pipeline.beam.reading.listed_inputs import list_inputs

    listed = list_inputs(patterns, output)
    listed.log(_log)
    return listed


def _train(parser: OneLineParser, args, output: str, listed, earlier: list[str]) -> str:
    from pipeline.beam.run.summary import named_skips, skipped_text
    from pipeline.beam.tokenizer_training import SAVED_FILES, TrainingText, save_tokenizer, train_tokenizer
    from pipeline.beam.writing.finalize import count_by_kind
    from pipeline.tokenizer.trained_output import replace_tokenizer_output, write_tokenizer_run
    from schemas import manifest as m

    started = time.perf_counter()
    text = TrainingText(listed.units, args.text_column, args.keep_boilerplate)
    tok = train_tokenizer(text, args.kind, args.vocab_size, lowercase=not args.cased,
                          min_frequency=args.min_frequency, show_progress=stderr_is_terminal())
    by_kind = count_by_kind([reason for _, reason in text.skipped])
    run_file = os.path.join(output, m.TOKENIZER_RUN_FILE)
    inputs = f"  inputs:    {text.read:,} read, {skipped_text(len(text.skipped), by_kind)}"
    if not text.used:
        for line in [inputs, *named_skips(text.skipped, "the list above")]:
            _log.error(line)
        parser.exit(1, f"{parser.prog}: error: no input has text to train on ({plural(text.read, 'input')} "
                       f"read, all skipped); nothing was written to {output}\n")
    replace_tokenizer_output(output, earlier, list(SAVED_FILES))
    files = save_tokenizer(tok, args.kind, not args.cased, output)
    write_tokenizer_run(output, {
        m.KEY_FILES: files, "kind": args.kind, "lowercase": not args.cased, m.KEY_VOCAB_SIZE: tok.get_vocab_size(),
        "vocab_size_asked": args.vocab_size, "min_frequency": args.min_frequency, "inputs": args.input,
        m.KEY_COUNTS: {m.FILES_READ: text.read, m.FILES_SKIPPED: len(text.skipped),
                       m.FILES_SKIPPED_BY_REASON: by_kind, m.CHARACTERS: text.chars},
        m.KEY_SKIPPED: [{m.KEY_PATH: path, m.KEY_REASON: reason} for path, reason in text.skipped],
        "left_out": listed.left_out,
    })
    _log.info("trained %s %s tokenizer of %d ids (asked %d) on %s, %s of text, in %s",
              "a cased" if args.cased else "an uncased", args.kind, tok.get_vocab_size(), args.vocab_size,
              plural(text.used, "input"), human_bytes(text.chars), human_seconds(time.perf_counter() - started))
    for line in [inputs, *named_skips(text.skipped, run_file)]:
        _log.info(line)
    _log.info("saved to %s (%s); use it with --tokenizer %s", output, ", ".join(files), output)
    return output


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    run(argv)


if __name__ == "__main__":
    main()
