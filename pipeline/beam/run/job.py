"""The preprocess job as library code: check and prepare a run (tokenizer, backend, inputs, output
folder or resume), then build and run the Beam pipeline and report where the time went.
`jobs/preprocess.py` only parses the command line around these two calls."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import posixpath
import time
from collections.abc import Iterable
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.beam.reading.compression import is_compressed
from pipeline.beam.reading.formats.registry import FORMAT_JSONL, FORMAT_TEXT
from pipeline.beam.reading.listed_inputs import InputListing
from pipeline.beam.reading.work_units import (
    DEFAULT_GROUP_INPUTS,
    FORMAT_HF,
    WorkUnit,
    hf_revision,
    hf_units,
    iter_split_large_inputs,
)
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.data_flush import side_input_sizes_without_module_scan, whole_element_flushes
from pipeline.beam.run.graph_memos import graph_memos
from pipeline.beam.run.native_heap import compact_native_heap
from pipeline.beam.run.no_rows import check_made_rows, made_rows
from pipeline.beam.run.output_folder import forget_no_rows, prepare_output, warn_large_boilerplate
from pipeline.beam.run.progress import UnitIndex, UnitProgress
from pipeline.beam.run.resume import prepare_resume, reuse_line, run_record, start_run
from pipeline.beam.run.runner_options import (
    ONE_WORKER_BYTES,
    close_dask_client,
    dask_cluster,
    dask_defaults,
    local_runner_defaults,
    local_worker_count,
    outside_ipython,
    runner_aliases,
    tokenizer_threads,
)
from pipeline.beam.run.summary import summary_lines
from pipeline.beam.transforms import Preprocess, stage_seconds
from pipeline.beam.writing.arrow_io import read_text
from pipeline.beam.writing.inputs_file import read_entries
from pipeline.console import Interrupted, on_interrupt, quiet_worker_output, run_interruptible
from pipeline.console.formatting import human_bytes, plural
from pipeline.console.logs import WorkerOutput
from pipeline.tokenizer.derived_cuts import no_cut_reason
from pipeline.tokenizer.encode import MAX_CARRY_CHARS
from pipeline.tokenizer.fast import choose_backend
from pipeline.tokenizer.parsed import release_parses
from pipeline.tokenizer.resolve import resolve_spec
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas.options import BACKEND_FAST, DEFAULT_TASK_INPUTS, PACKING_SENTENCES

_log = logging.getLogger("maskbeam.preprocess")


@dataclass(frozen=True)
class ListingFacts:
    """What the launcher keeps of the listing while the job runs (the workers list the inputs again):
    the inputs and bytes, whether the job fits one worker, the units it hands the graph itself (dataset
    row ranges), and the progress index (`progress.UnitIndex`, ~21 bytes a unit). A million WorkUnits
    held for the whole run were ~600 MB of the launcher, and the progress' dict of them as much again."""

    inputs: int
    bytes: int
    one_worker: bool
    listed: tuple[WorkUnit, ...]
    index: UnitIndex

    split: tuple[WorkUnit, ...] = ()  # large text inputs many workers share in byte ranges (said at the start)
    alone: tuple[WorkUnit, ...] = ()  # compressed inputs over --split_bytes, each streamed by one worker

    @classmethod
    def of(cls, units: Iterable[WorkUnit], split_bytes: int = 0) -> ListingFacts:
        """The facts of `units` in one pass: a stream of them is never held whole."""
        one_worker = OneWorker()
        listed: list[WorkUnit] = []
        split: list[WorkUnit] = []
        alone: list[WorkUnit] = []

        def seen(unit: WorkUnit) -> WorkUnit:
            one_worker.add(unit)
            if unit.format == FORMAT_HF:
                listed.append(unit)
            if unit.split_bytes:
                split.append(unit)
            if split_bytes and unit.size > split_bytes and is_compressed(unit.source):
                alone.append(unit)
            return unit

        index = UnitIndex(seen(unit) for unit in units)
        return cls(inputs=index.inputs, bytes=index.bytes, one_worker=one_worker.fits, listed=tuple(listed),
                   index=index, split=tuple(split), alone=tuple(alone))


@dataclass(frozen=True)
class PreparedRun:
    """A checked run: its config (with the tokenizer backend resolved), tokenizer and work units."""

    config: PreprocessConfig
    spec: TokenizerSpec
    units: list[WorkUnit]
    why_not_fast: list[str]
    tokenizer_threads: int | None = None  # --tokenizer_threads: rayon threads per SDK worker process
    group_inputs: int = DEFAULT_GROUP_INPUTS  # --group_inputs: small inputs one worker call writes together
    task_inputs: int = DEFAULT_TASK_INPUTS  # --task_inputs: inputs a bucket task of the end of the job reads back
    facts: ListingFacts | None = None  # what running needs of `units` (which a caller may then drop)

    def listing(self) -> ListingFacts:
        return self.facts if self.facts is not None else ListingFacts.of(self.units)

    def without_units(self) -> PreparedRun:
        """This run holding only its listing's facts: the launcher's memory no longer grows with the inputs."""
        return dataclasses.replace(self, units=[], facts=self.listing())


def prepare_run(config: PreprocessConfig, tokenizer_backend: str, *, resume: bool,
                overwrite: bool, keep_units: bool = True) -> PreparedRun | None:
    """Validate everything and get the output folder ready, before any data moves.

    The inputs are listed as a stream into the run's facts (`ListingFacts`); the units themselves
    are kept (`PreparedRun.units`) only with `keep_units` (and listed whole for `resume` alone).

    Returns:
        The prepared run, or None when `resume` finds the output already complete.

    Raises:
        ValueError, TokenizerError, InputError, FileExistsError: naming the bad option or input.
    """
    config.validate()
    spec = resolve_spec(config.tokenizer)  # the checked spec, kept on disk by its bytes (resolve.py)
    backend, why_not_fast = choose_backend(tokenizer_backend, spec.json)
    config = dataclasses.replace(config, tokenizer_backend=backend)
    inputs = InputListing(list(config.inputs), config.output)
    inputs.log(_log)
    whole = no_cut_reason(spec.json)
    if whole is not None:
        _log.info("tokenizer: no place where its text may be cut is proven (%s): each document is encoded whole "
                  "(up to %s characters) and large text inputs are not split into byte ranges", whole,
                  f"{MAX_CARRY_CHARS:,}")
    units: Iterable[WorkUnit] = iter_split_large_inputs(inputs, config.split_bytes, split_text=whole is None)
    if config.hf_dataset:
        config = dataclasses.replace(config, hf_revision=hf_revision(config.hf_dataset, config.hf_split))
        units = itertools.chain(units, hf_units(config.hf_dataset, config.hf_split, config.text_column,
                                                config.hf_revision))
    if keep_units or resume:  # --resume compares every input with its record
        units = list(units)
    facts = ListingFacts.of(units, config.split_bytes)
    _log_splitting(facts, config.split_bytes)
    record = run_record(config, spec.fingerprint)
    release_parses()  # the launcher's checks are done: let the parsed tokenizer.json go
    if resume:
        if prepare_resume(config.output, record, units) == "complete":
            return None
        _log.info(reuse_line(config.output, units))
    else:
        prepare_output(config.output, overwrite, record)
        start_run(config.output, record)
    forget_no_rows(config.output)
    return PreparedRun(config=config, spec=spec, units=units if keep_units else [], why_not_fast=why_not_fast,
                       facts=facts)


def _log_splitting(facts: ListingFacts, split_bytes: int) -> None:
    """Say which large inputs many workers share and which one worker streams alone."""
    split, alone = facts.split, facts.alone
    if split:
        _log.info("%d large text input(s) are tokenized by many workers in byte ranges of about %s "
                  "(--split_bytes): %s", len(split), human_bytes(split_bytes),
                  ", ".join(posixpath.basename(u.source) for u in split[:5]) + (" ..." if len(split) > 5 else ""))
    if alone:
        _log.info("%d compressed input(s) over --split_bytes %s are each streamed by one worker (a compressed "
                  "stream cannot be split; store it uncompressed or in parts to spread it): %s", len(alone),
                  human_bytes(split_bytes),
                  ", ".join(posixpath.basename(u.source) for u in alone[:5]) + (" ..." if len(alone) > 5 else ""))


def run_pipeline(run: PreparedRun, beam_args: list[str], *, dask_local_workers: int | None = None,
                 progress_every: float = 10.0, handle_signals: bool = False,
                 terminal: bool | None = None, quiet: bool = False):
    """Build and run the pipeline on the runner `beam_args` name (the local FnApiRunner by default:
    threads for the fast tokenizer, processes otherwise), showing progress; then the warnings and,
    last, the summary. Returns the finished PipelineResult.

    With `handle_signals` (the command line), Ctrl-C/SIGTERM stop every worker: under
    `pipeline.console.run_main` the process exits with one line naming the inputs done; on the main
    thread Interrupted is raised carrying `done` and `total` inputs. With `quiet`, the worker
    processes' own stderr goes to a file and only what it says beyond their logging is shown.
    """
    config = run.config
    started = time.perf_counter()
    temp_dir = posixpath.join(config.output, m.TEMP_DIR)
    remote = "://" in config.output and not config.output.startswith("file://")
    with quiet_worker_output(quiet) as workers:  # before the bar: it writes to the console stream set up here
        progress = UnitProgress(run.listing().index, temp_dir, every=progress_every,
                                poll_seconds=5.0 if remote else 0.5,
                                terminal=terminal)
        result = _run_watched(run, beam_args, dask_local_workers, handle_signals, progress, workers)
        wall = time.perf_counter() - started
        manifest, folder = _read_run_manifest(config.output)
        progress.finish(shards=sum(len(info[m.KEY_SHARDS]) for info in manifest[m.KEY_SPLITS].values()),
                        rows=sum(int(info.get(m.KEY_ROWS, 0)) for info in manifest[m.KEY_SPLITS].values()))
        if workers is not None:
            workers.report(_log, failed=False)
    stages = stage_seconds(result)
    warn_large_boilerplate(read_entries(folder, manifest))  # warnings before the summary: the summary ends the run
    _log.info("time: %.1f s wall; worker seconds per stage: %s", wall,
              ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(stages.items())) or "not reported")
    for line in summary_lines(manifest, config.output, wall, run.listing().bytes):
        _log.info(line)
    if not made_rows(manifest):
        check_made_rows(manifest, read_entries(folder, manifest))
    return result


def _read_run_manifest(output: str) -> tuple[dict, str]:
    """The finished run's manifest and the folder it lies in (with its INPUTS_FILE): the output's, or
    the record a run that made no rows leaves in the temp folder."""
    path, folder = posixpath.join(output, m.MANIFEST_FILE), output
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    if not FileSystems.exists(path) and FileSystems.exists(posixpath.join(temp_dir, m.NO_ROWS_FILE)):
        path, folder = posixpath.join(temp_dir, m.NO_ROWS_FILE), temp_dir
    return json.loads(read_text(path)), folder


class OneWorker:
    """Whether a job is small enough for one in-process local worker, unit by unit: at most
    ONE_WORKER_BYTES of uncompressed text and .jsonl files (never a compressed input, a Parquet file
    or a dataset range, whose text may be many times the size it is listed with)."""

    def __init__(self) -> None:
        self.total = 0
        self.other = False

    def add(self, unit: WorkUnit) -> None:
        if unit.format not in (FORMAT_TEXT, FORMAT_JSONL) or is_compressed(unit.file):
            self.other = True
        self.total += unit.size

    @property
    def fits(self) -> bool:
        return not self.other and self.total <= ONE_WORKER_BYTES


def fits_one_worker(units: Iterable[WorkUnit]) -> bool:
    """`OneWorker` of `units`."""
    one = OneWorker()
    for unit in units:
        one.add(unit)
    return one.fits


def job_runner_flags(config: PreprocessConfig, units: list[WorkUnit], beam_args: list[str],
                     one_worker: bool | None = None) -> list[str]:
    """`beam_args` with the local runner's defaults for this job: a small job (`fits_one_worker` of
    `units`, or `one_worker` where given) on
    one in-process worker whatever it runs (one worker shares no GIL, and a worker process's start,
    which imports everything again, is ~1.5 CPU-s of each); a larger one on a worker per core, threads
    where the work releases the GIL (the fast backend without sentence packing), else processes."""
    threads_suit = config.tokenizer_backend == BACKEND_FAST and config.packing != PACKING_SENTENCES
    one_worker = fits_one_worker(units) if one_worker is None else one_worker
    return local_runner_defaults(beam_args, prefer_threads=threads_suit, one_worker=one_worker)


def _run_watched(run: PreparedRun, beam_args: list[str], dask_local_workers: int | None, handle_signals: bool,
                 progress: UnitProgress, workers: WorkerOutput | None):
    """The Beam run with its progress thread, and what an interrupt or a failure reports."""
    if handle_signals:
        def describe() -> str:
            progress.refresh()
            return (f"after {progress.done} of {plural(progress.total, 'input')}; rerun the same command with "
                    f"--resume to continue")
        on_interrupt(describe)
    try:
        with progress:  # a failure leaves without the closing line
            go = (lambda: _run_beam(run, beam_args, dask_local_workers))
            return run_interruptible(go) if handle_signals else go()
    except Interrupted as stop:
        progress.refresh()
        stop.done, stop.total = progress.done, progress.total
        raise
    except BaseException:
        if workers is not None:
            workers.report(_log, failed=True)
        raise
    finally:
        if handle_signals:
            on_interrupt(None)


def _run_beam(run: PreparedRun, beam_args: list[str], dask_local_workers: int | None):
    config = run.config
    config_threads = run.tokenizer_threads
    facts = run.listing()
    with compact_native_heap(), dask_cluster(dask_local_workers) as dask_args, outside_ipython(), \
            whole_element_flushes(), side_input_sizes_without_module_scan(), graph_memos():
        beam_args = dask_defaults(runner_aliases(beam_args) + dask_args, dask_local_workers)
        options = PipelineOptions(job_runner_flags(config, [], beam_args, one_worker=facts.one_worker))
        runner = options.view_as(StandardOptions).runner
        workers = local_worker_count(options)
        _log.info("tokenizer backend: %s%s", config.tokenizer_backend,
                  f" (the fast path does not cover: {'; '.join(run.why_not_fast)})" if run.why_not_fast else "")
        mode = options.view_as(DirectOptions).direct_running_mode if workers else ""
        _log.info("runner: %s%s; %s; output %s", runner,
                  f" with {plural(workers, 'worker')}, {mode}" if workers else "",
                  plural(facts.inputs, "input"), config.output)
        if not workers:
            _log.info("progress below comes from the finished work in %s; the runner's own UI shows each stage",
                      posixpath.join(config.output, m.TEMP_DIR))
        pipeline = beam.Pipeline(options=options)
        threads = tokenizer_threads(options, config_threads)
        # Files are listed again by the workers: the job graph carries the patterns, not the files.
        _ = pipeline | "Preprocess" >> Preprocess(units=list(facts.listed), patterns=list(config.inputs), spec=run.spec,
                                                  config=config,
                                                  local_workers=workers, tokenizer_threads=threads,
                                                  group_inputs=run.group_inputs, inputs_per_task=run.task_inputs)
        result = pipeline.run()
        result.wait_until_finish()
        if runner and runner.endswith("DaskRunner"):
            close_dask_client()
    return result
