"""Raw books to masked 512-token Arrow shards on Apache Beam.

    python -m jobs.preprocess --input PATTERN [--input ...] --output DIR --tokenizer NAME_OR_PATH [options]
    python -m jobs.preprocess --output DIR      # the embedded sample: 3 books, bert-base-uncased

Options are parsed as in Beam's wordcount.py: our flags here, everything else to PipelineOptions.
This module imports Beam, pyarrow and the tokenizer only inside `run()`: `main()` must take charge of
Ctrl-C and SIGTERM before any library starts a thread (see `pipeline.console.interrupt.run_main`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from pipeline.console import (
    LOG_LEVELS,
    Interrupted,
    exit_interrupted,
    run_main,
    setup_logging,
    stderr_is_terminal,
)
from pipeline.console.arguments import DefaultsFormatter, OneLineParser, parser_flags
from pipeline.console.preflight import missing_local_input, missing_tokenizer
from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from schemas.options import (
    BACKEND_AUTO,
    DEFAULT_GROUP_INPUTS,
    DEFAULT_MAX_SPAN,
    DEFAULT_SPAN_P,
    DEFAULT_TASK_INPUTS,
    GROUPED_INPUT_BYTES,
    PACKING_DOC,
    PACKING_MODES,
    PACKING_SENTENCES,
    SCRIPT_NAMES,
    SCRIPT_OTHER,
    TOKENIZER_BACKENDS,
    UNIT_SPAN,
    UNIT_TOKEN,
    UNIT_WORD,
    VALIDATION_BY_ROW,
    VALIDATION_UNITS,
)

_log = logging.getLogger("maskbeam.preprocess")
PROG = "python -m jobs.preprocess"
# Given only where they do something (None: not given); their defaults, as the help says.
DEFAULT_SHORT_SEQ_PROB = 0.1
DEFAULT_MIN_TOKENS = 64


def build_parser() -> argparse.ArgumentParser:
    from schemas.shard import DEFAULT_SEQ_LEN, MASKING_MODES, MASKING_STATIC  # pyarrow: see the module docstring

    p = OneLineParser(prog=PROG, description=__doc__.split("\n")[0], formatter_class=DefaultsFormatter)
    p.add_argument("--input", action="append", default=[], metavar="PATTERN",
                   help="file, directory (recursive) or glob; repeatable; any Beam filesystem (gs://, s3://); "
                        "default: the embedded sample of 3 books")
    p.add_argument("--hf_dataset", help="a Hub dataset id or a local `datasets` folder (default: none)")
    p.add_argument("--hf_split", default="train", help="with --hf_dataset only: its split (default train)")
    p.add_argument("--text_column", default="text", help="text field of .jsonl/.parquet/--hf_dataset rows")
    p.add_argument("--output", required=False,
                   help="output folder, local or on any Beam filesystem (required; refused if it holds anything, "
                        "unless --overwrite replaces an earlier MaskBeam output or --resume continues one)")
    p.add_argument("--tokenizer", required=False,
                   help="tokenizer.json, a folder holding one, or a Hub name; default: the embedded bert-base-uncased")
    p.add_argument("--keep_boilerplate", action="store_true",
                   help="keep Project Gutenberg header and licence (default: cut)")
    p.add_argument("--max_seq_length", type=int, default=DEFAULT_SEQ_LEN,
                   help="tokens per row, [CLS] and [SEP] included")
    p.add_argument("--min_tokens", type=int, default=None,
                   help=f"content tokens a final short row needs to be kept (default: {DEFAULT_MIN_TOKENS}, or "
                        "max_seq_length - 2 when that is less)")
    p.add_argument("--packing", choices=PACKING_MODES, default=PACKING_DOC,
                   help="doc: rows never span documents; concat: short documents share rows; "
                        "sentences: rows end at sentence ends")
    p.add_argument("--short_seq_prob", type=float, default=None,
                   help=f"with --packing sentences only: share of rows given a shorter random target "
                        f"(default {DEFAULT_SHORT_SEQ_PROB}, as BERT)")
    p.add_argument("--masking", choices=MASKING_MODES, default=MASKING_STATIC,
                   help="static: rows stored masked, --dupe_factor copies each; dynamic: rows stored unmasked, "
                        "the loader masks them per epoch")
    p.add_argument("--dupe_factor", type=int, default=1,
                   help="with --masking static: copies of each row, each with its own mask")
    p.add_argument("--mlm_probability", type=float, default=0.15, help="share of a row's ordinary tokens made targets")
    unit = p.add_mutually_exclusive_group()
    unit.add_argument("--whole_word_mask", action="store_true",
                      help="select whole words: every piece of a selected word is a target")
    unit.add_argument("--span_mask", action="store_true", help="SpanBERT-style spans of geometric length")
    p.add_argument("--span_p", type=float, default=None,
                   help=f"with --span_mask only: span length in words ~ Geometric(span_p) (default {DEFAULT_SPAN_P})")
    p.add_argument("--max_span", type=int, default=None,
                   help=f"with --span_mask only: longest span in words (default {DEFAULT_MAX_SPAN})")
    p.add_argument("--mask_replace_prob", type=float, default=0.8, help="share of targets replaced by [MASK]")
    p.add_argument("--random_replace_prob", type=float, default=0.1,
                   help="share of targets replaced by a random ordinary token (the rest stay unchanged)")
    p.add_argument("--seed", type=int, default=0, help="global seed of masking and the validation draw, in [0, 2**64)")
    p.add_argument("--validation_fraction", type=float, default=0.01,
                   help="share of rows (or of documents, with --validation_unit document) held out; at the default a "
                        "corpus of under ~100 rows (the embedded sample) may draw none")
    p.add_argument("--validation_unit", choices=VALIDATION_UNITS, default=VALIDATION_BY_ROW,
                   help="row (default): each row drawn on its own, so a book's rows land in both splits; "
                        "document: whole documents by content hash (an honest validation loss)")
    p.add_argument("--num_shards", type=int, default=None, help="shards per split (default: about 256 MB each)")
    p.add_argument("--dedup", action="store_true",
                   help="drop inputs whose content equals an earlier input's (default: off)")
    p.add_argument("--near_dedup", type=float, metavar="J",
                   help="drop the later inputs (by path) of each cluster of near duplicates at estimated word-bigram "
                        "similarity >= J (e.g. 0.8; default: off); pairs >= 0.5 are always reported in the manifest")
    p.add_argument("--max_unk_fraction", type=float, default=0.1,
                   help="skip inputs whose share of [UNK] among their tokens exceeds this "
                        "(default 0.1; 1 turns it off)")
    p.add_argument("--scripts", metavar="NAMES",
                   help=f"keep only inputs whose dominant Unicode script is listed, comma-separated "
                        f"({', '.join((*SCRIPT_NAMES, SCRIPT_OTHER))}; default: all)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier MaskBeam output in --output (default: refuse)")
    p.add_argument("--push_to_hub", metavar="USER/NAME",
                   help="publish the output to this Hub dataset repo after a successful run (token: HF_TOKEN or "
                        "login; default: none)")
    p.add_argument("--hub_private", action="store_true",
                   help="with --push_to_hub only: create the repo private (default: public)")
    p.add_argument("--split_bytes", type=int, default=64 * 1024 * 1024,
                   help="tokenize uncompressed text and .jsonl files larger than this in byte ranges on many "
                        "workers (compressed files are streamed by one worker each)")
    p.add_argument("--group_inputs", type=int, default=DEFAULT_GROUP_INPUTS, metavar="N",
                   help=f"small whole files (up to {GROUPED_INPUT_BYTES >> 20} MB each) consecutive by path are "
                        f"read by one worker call, up to N of them and --split_bytes in all, into one pair of part "
                        f"files; the output is the same for any N (default {DEFAULT_GROUP_INPUTS}; 1: every input "
                        f"alone)")
    p.add_argument("--task_inputs", type=int, default=DEFAULT_TASK_INPUTS, metavar="N",
                   help=f"the end of the job reads every input's result back from the workers' files in tasks of "
                        f"about N inputs each (a worker holds one task: ~2 KB an input); the output is the same for "
                        f"any N (default {DEFAULT_TASK_INPUTS})")
    p.add_argument("--dask_local_workers", type=int, metavar="N",
                   help="start a local Dask cluster of N worker processes and run on it with DaskRunner (default: "
                        "none; the local FnApiRunner with one worker per core)")
    p.add_argument("--tokenizer_backend", choices=TOKENIZER_BACKENDS, default=BACKEND_AUTO,
                   help="fast: MaskBeam's jitted tokenizers, ids identical to the tokenizer's (WordPiece, byte-level "
                        "BPE, SentencePiece Unigram and BPE with byte fallback; refused, naming what is not "
                        "covered, otherwise); hf: the `tokenizers` library; auto (default): fast where it is "
                        "exact, else hf, and the log says why")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run of the same config in --output, reusing finished work "
                        "(default: off; not with --overwrite)")
    p.add_argument("--tokenizer_threads", type=int, metavar="N",
                   help="threads of the `tokenizers` library per SDK worker process (default: the cores shared "
                        "out between local worker processes; 1 on other runners, which start a process per core)")
    p.add_argument("--log_level", choices=LOG_LEVELS,
                   help="also show Beam's and its workers' logs from this level (default: only warnings; "
                        "MaskBeam's own progress and summary are always shown)")
    p.add_argument("--progress_seconds", type=float, default=10.0,
                   help="when stderr is not a terminal, one progress line every this many seconds (default 10); "
                        "a terminal gets a progress bar")
    return p


def _checked(parser: argparse.ArgumentParser, known: argparse.Namespace) -> None:
    """Refuse options that would do nothing in the chosen mode (each named once), then fill in the
    defaults of those given only where they apply."""
    useless = []
    if known.short_seq_prob is not None and known.packing != PACKING_SENTENCES:
        useless.append("--short_seq_prob applies only with --packing sentences")
    for flag in ("span_p", "max_span"):
        if getattr(known, flag) is not None and not known.span_mask:
            useless.append(f"--{flag} applies only with --span_mask")
    if known.hub_private and not known.push_to_hub:
        useless.append("--hub_private applies only with --push_to_hub")
    if known.hf_split_given and not known.hf_dataset:
        useless.append("--hf_split applies only with --hf_dataset")
    if known.resume and known.overwrite:
        useless.append("--resume continues the run in --output and --overwrite deletes it: give one of them")
    if known.masking == "dynamic" and known.dupe_factor != 1:
        useless.append("--dupe_factor applies to --masking static only; dynamic output masks per epoch")
    if useless:
        parser.error("; ".join(useless))
    known.short_seq_prob = DEFAULT_SHORT_SEQ_PROB if known.short_seq_prob is None else known.short_seq_prob
    known.span_p = DEFAULT_SPAN_P if known.span_p is None else known.span_p
    known.max_span = DEFAULT_MAX_SPAN if known.max_span is None else known.max_span


def resolved_min_tokens(known: argparse.Namespace) -> int:
    """--min_tokens, or its default capped to the row's content (so --max_seq_length 32 alone works)."""
    return min(DEFAULT_MIN_TOKENS, known.max_seq_length - 2) if known.min_tokens is None else known.min_tokens


def run(argv: list[str] | None = None, *, command_line: bool = False):
    """Parse and validate everything, the Beam options and runner included (exit 2 with one line before
    anything is written), then run the pipeline.

    With `command_line` (as `main` calls it): set up the console logging from --log_level, keep the
    worker processes' own stderr off the console, and let Ctrl-C/SIGTERM stop the workers and exit 130/143
    with a one-line message.

    Returns:
        The Beam PipelineResult, or None when --resume finds the output already complete.
    """
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    known, beam_args = parser.parse_known_args(argv)
    known.hf_split_given = any(a == "--hf_split" or a.startswith("--hf_split=") for a in given)
    terminal = stderr_is_terminal()
    if command_line:
        setup_logging(known.log_level)
    # Before Beam is imported: what needs no library. A missing --output with arguments left over may
    # be a mistyped --output, which the Beam check below names with the closest flag.
    if not known.output and not beam_args:
        parser.error("--output is required")
    _checked(parser, known)
    if known.group_inputs < 1:
        parser.error(f"--group_inputs must be >= 1, got {known.group_inputs}")
    if known.task_inputs < 1:
        parser.error(f"--task_inputs must be >= 1, got {known.task_inputs}")
    if known.tokenizer_threads is not None and known.tokenizer_threads < 1:
        parser.error(f"--tokenizer_threads must be >= 1, got {known.tokenizer_threads}")
    if known.dask_local_workers is not None and known.dask_local_workers < 1:
        parser.error(f"--dask_local_workers must be >= 1, got {known.dask_local_workers}")
    missing = [*map(missing_local_input, known.input), known.tokenizer and missing_tokenizer(known.tokenizer)]
    if any(missing):
        parser.error(next(problem for problem in missing if problem))
    from pipeline.beam.run.runner_options import DASK_RUNNER, check_beam_options, runner_aliases

    dask_runner = [f"--runner={DASK_RUNNER}"] if known.dask_local_workers else []
    try:
        check_beam_options(runner_aliases(beam_args) + dask_runner, job_flags=parser_flags(parser))
    except ValueError as error:
        parser.error(str(error))
    if not known.output:
        parser.error("--output is required")
    if not known.input and not known.hf_dataset:
        known.input = [str(SAMPLE_BOOKS)]
        _log.info("no --input: using the embedded sample, %d public-domain books in %s",
                  len(list(SAMPLE_BOOKS.glob("*.txt"))), SAMPLE_BOOKS)
    if not known.tokenizer:
        known.tokenizer = str(SAMPLE_TOKENIZER)
        _log.info("no --tokenizer: using the embedded bert-base-uncased in %s", SAMPLE_TOKENIZER)
    return _run_checked(parser, known, beam_args, command_line=command_line, terminal=terminal)


def _run_checked(parser: argparse.ArgumentParser, known: argparse.Namespace, beam_args: list[str], *,
                 command_line: bool, terminal: bool):
    from pipeline.beam.reading.work_units import InputError
    from pipeline.beam.run.config import PreprocessConfig
    from pipeline.beam.run.job import prepare_run, run_pipeline
    from pipeline.beam.run.runner_options import use_filesystem_options
    from pipeline.beam.transforms import failure_message
    from pipeline.tokenizer.spec import TokenizerError

    # The Hub client and pyarrow.compute (~0.13 CPU-s) only where the run publishes.
    publish_errors: tuple[type[Exception], ...] = ()
    if known.push_to_hub:
        from pipeline.consumers.publish import PublishError, check_repo_id, publish_output

        publish_errors = (PublishError,)

    config = PreprocessConfig(
        inputs=tuple(known.input), output=known.output.rstrip("/") or "/", tokenizer=known.tokenizer,
        hf_dataset=known.hf_dataset, hf_split=known.hf_split, text_column=known.text_column,
        keep_boilerplate=known.keep_boilerplate, max_seq_length=known.max_seq_length,
        min_tokens=resolved_min_tokens(known),
        packing=known.packing, masking=known.masking, dupe_factor=known.dupe_factor,
        mlm_probability=known.mlm_probability, mask_replace_prob=known.mask_replace_prob,
        random_replace_prob=known.random_replace_prob, seed=known.seed,
        validation_fraction=known.validation_fraction, validation_unit=known.validation_unit,
        num_shards=known.num_shards, dedup=known.dedup,
        masking_unit=UNIT_WORD if known.whole_word_mask else UNIT_SPAN if known.span_mask else UNIT_TOKEN,
        span_p=known.span_p, max_span=known.max_span, short_seq_prob=known.short_seq_prob,
        split_bytes=known.split_bytes, max_unk_fraction=known.max_unk_fraction, near_dedup=known.near_dedup,
        scripts=tuple(s.strip() for s in known.scripts.split(",") if s.strip()) if known.scripts else (),
    )
    use_filesystem_options(beam_args)
    try:
        if known.push_to_hub:
            check_repo_id(known.push_to_hub)
        prepared = prepare_run(config, known.tokenizer_backend, resume=known.resume, overwrite=known.overwrite,
                               keep_units=False)
    except (ValueError, TokenizerError, InputError, FileExistsError, *publish_errors) as error:
        parser.error(str(error))
    if prepared is None:
        _log.info("--resume: %s is complete and every shard checks out; nothing to do", config.output)
        return None
    prepared = dataclasses.replace(prepared.without_units(), tokenizer_threads=known.tokenizer_threads,
                                   group_inputs=known.group_inputs, task_inputs=known.task_inputs)
    quiet = command_line and known.log_level in (None, "WARNING", "ERROR")
    try:
        result = run_pipeline(prepared, beam_args, dask_local_workers=known.dask_local_workers,
                              progress_every=known.progress_seconds, handle_signals=command_line,
                              terminal=terminal, quiet=quiet)
    except Interrupted as stop:
        exit_interrupted(f"interrupted ({stop}) after {stop.done} of {stop.total} inputs; rerun the same "
                         f"command with --resume to continue", stop.signum)
    except Exception as error:
        if not quiet:
            raise
        if isinstance(error, ValueError) and type(error).__module__.startswith("pipeline."):
            # Raised by the launcher about the data (a run that made no rows): nothing to resume.
            parser.exit(1, f"{parser.prog}: error: {error}\n")
        _log.error("the run failed: %s", failure_message(error))
        _log.error("finished work is kept in %s: fix the cause and rerun the same command with --resume "
                   "(--log_level DEBUG shows the full traceback)", config.output)
        raise SystemExit(1) from None
    if known.push_to_hub:
        try:
            _log.info("published %s", publish_output(config.output, known.push_to_hub, private=known.hub_private))
        except PublishError as error:
            parser.exit(1, f"--push_to_hub: {error} (the output in {config.output} is complete; "
                           f"retry with python -m jobs.publish {config.output} --repo_id {known.push_to_hub})\n")
    return result


def main(argv: list[str] | None = None) -> None:
    """The command line: Ctrl-C and SIGTERM are taken in hand before anything else (imports included),
    so they stop the job with one line whenever they come."""
    run_main(lambda: run(argv, command_line=True))


def exit_status(code: object) -> int:
    """The process exit status Python gives `SystemExit(code)`: None 0, an int itself, anything else
    printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_without_teardown(entry: Callable[[], object]) -> NoReturn:
    """Run `entry()` (a process's entry point), then end the process as `sys.exit` would but without
    the interpreter's teardown.

    Once the job has returned, everything it wrote is closed and renamed into place; what is left is
    the teardown, which frees every module's objects one by one (numba's and LLVM's, Beam's,
    pyarrow's): ~0.5-0.7 CPU-seconds after a run, a quarter of a small job's cost. Here Python's own
    exit steps come first, in its order: wait for the threads that are not daemons, run the `atexit`
    handlers (logging's flush and close among them), flush stdout and stderr; then the process
    leaves with the same status. Never for a caller that goes on after `main()` (a test, a library
    user). An exception other than SystemExit, or a Python without `atexit._run_exitfuncs`, leaves
    the ordinary way.
    """
    try:
        entry()
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:
        sys.exit(code)
    status = exit_status(code)
    current = threading.current_thread()
    for thread in threading.enumerate():  # as threading._shutdown does at every exit
        if thread is not current and not thread.daemon:
            thread.join()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed or replaced: nothing to write
            stream.flush()
    os._exit(status)


def console() -> None:
    """The `maskbeam-preprocess` console script: `main()` without the interpreter's teardown."""
    exit_without_teardown(main)


if __name__ == "__main__":
    console()
