"""Train a tokenizer on the same cleaned text the preprocess job reads.

    python -m jobs.train_tokenizer --input PATTERN [--input ...] --vocab_size 30522 --output DIR
        [--kind wordpiece|bpe] [--cased]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from pipeline.beam.readers import InputError, expand_inputs
from pipeline.beam.tokenizer_training import KINDS, iter_training_text, save_tokenizer, train_tokenizer
from pipeline.console import human_bytes, human_seconds, setup_logging
from pipeline.console.arguments import OneLineParser

_log = logging.getLogger("maskbeam.train_tokenizer")


def run(argv: list[str] | None = None) -> str:
    parser = OneLineParser(prog="python -m jobs.train_tokenizer", description=__doc__.split("\n")[0])
    parser.add_argument("--input", action="append", required=True, metavar="PATTERN")
    parser.add_argument("--output", required=True, help="folder for tokenizer.json and its configs")
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--kind", choices=KINDS, default="wordpiece", help="wordpiece (BERT) or byte-level bpe")
    parser.add_argument("--cased", action="store_true", help="keep case (default: lowercase, as bert-base-uncased)")
    parser.add_argument("--min_frequency", type=int, default=2)
    parser.add_argument("--text_column", default="text")
    parser.add_argument("--keep_boilerplate", action="store_true")
    args = parser.parse_args(argv)
    if args.vocab_size < 100:
        parser.error(f"--vocab_size must be >= 100, got {args.vocab_size}")
    try:
        units = expand_inputs(args.input)
    except InputError as error:
        parser.error(str(error))
    started = time.perf_counter()
    counted = _Counted(iter_training_text(units, args.text_column, args.keep_boilerplate))
    tok = train_tokenizer(counted, args.kind, args.vocab_size, lowercase=not args.cased,
                          min_frequency=args.min_frequency)
    save_tokenizer(tok, args.kind, not args.cased, args.output)
    _log.info("trained %s %s tokenizer of %d ids (asked %d) on %d input%s, %s of text, in %s",
              "a cased" if args.cased else "an uncased", args.kind, tok.get_vocab_size(), args.vocab_size, len(units),
              "" if len(units) == 1 else "s",
              human_bytes(counted.chars), human_seconds(time.perf_counter() - started))
    _log.info("saved to %s (tokenizer.json and its configs); use it with --tokenizer %s", args.output, args.output)
    return args.output


class _Counted:
    """The training texts, counting their characters as the trainer reads them."""

    def __init__(self, texts: Iterator[str]) -> None:
        self._texts, self.chars = texts, 0

    def __iter__(self) -> Iterator[str]:
        for text in self._texts:
            self.chars += len(text)
            yield text


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    run(argv)


if __name__ == "__main__":
    main()
