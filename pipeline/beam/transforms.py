"""Beam composites of the preprocess job: thin wrappers over the library functions.

    units | TokenizeAndChunk(...) | WriteShards(...)  ->  one manifest dict

Only small records travel between steps (unit and shard results); rows go through part files, so
no token is ever shuffled through a GroupByKey.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import threading
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.beam.dedup.band_packs import BandSlice, write_band_file
from pipeline.beam.dedup.near import (
    FindNearDuplicateCandidates,
    NearDuplicateRoots,
    input_bands,
    result_bands,
)
from pipeline.beam.dedup.root_table import RootsRef, read_roots
from pipeline.beam.dedup.twin_table import spill_twins, write_twin_table
from pipeline.beam.input_splits import SplitTask, scan_for_splits, stitch_splits, tokenize_split
from pipeline.beam.packed import allow
from pipeline.beam.reading.group_files import GroupFile, read_group_file, write_group_file
from pipeline.beam.reading.listed_inputs import InputListing
from pipeline.beam.reading.work_units import (
    DEFAULT_GROUP_INPUTS,
    UnitGroup,
    WorkUnit,
    group_size,
    group_units,
    groupable,
    iter_groups,
    iter_split_large_inputs,
)
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.spec_file import SpecFile, ship_spec
from pipeline.beam.unit_groups import InputFailed, process_group
from pipeline.beam.unit_results import UnitResult, _unpickled_result, unit_file_stem
from pipeline.beam.units import (
    STAGE_QUALITY,
    STAGE_READ,
    STAGE_TOKENIZE,
    STAGE_WRITE_PARTS,
    StageClock,
    UnitContext,
    process_unit,
)
from pipeline.beam.writing.finalize import add_totals, finalize_output
from pipeline.beam.writing.input_spills import INPUTS_PER_TASK, BucketTask, SpillRef, plan_tasks, write_spill
from pipeline.beam.writing.input_tasks import (
    TAG_BUCKET,
    TAG_RECORD,
    TAG_RUN,
    TAG_TOTALS,
    merge_bucket,
    run_task,
)
from pipeline.beam.writing.planning import balanced_bins
from pipeline.beam.writing.shard_plan import (
    RowSummary,
    SpilledTask,
    load_task,
    read_pieces,
    row_summary,
    shard_keys,
    shard_task,
    spill_task,
    spilled_pieces,
    spilled_rows,
)
from pipeline.beam.writing.sharding import STAGE_SHARDS, ShardTask, row_bytes, write_shard
from pipeline.tokenizer.derived_cuts import no_cut_reason
from pipeline.tokenizer.errors import TokenizerPanic, is_panic, panic_error
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas import options as o
from schemas.options import BACKEND_FAST
from schemas.shard import id_dtype_for_vocab

__all__ = ["SpreadUnits", "TokenizeAndChunk", "WriteShards", "Preprocess", "METRICS_NAMESPACE", "WorkFailed",
           "failure_message"]

METRICS_NAMESPACE = "maskbeam"
STAGE_MS_PREFIX = "stage_ms_"  # worker milliseconds per stage: read_clean, tokenize_chunk, write_parts, ...


_SETUP_LOCK = threading.Lock()


class WorkFailed(RuntimeError):
    """An unexpected error while processing one unit or shard; the message names it. (Bad input is
    not an error: it is skipped and reported with a reason.)"""

    MARK = "maskbeam work failed: "

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(f"{self.MARK}{what}: {type(error).__name__}: {error}")


def failure_message(error: BaseException) -> str:
    """The one line that says what failed, from whatever the runner raised around a WorkFailed."""
    text = str(error)
    if WorkFailed.MARK in text:
        line = text.split(WorkFailed.MARK, 1)[1].splitlines()[0]
        return line.split(" [while running")[0]
    lines = [line for line in text.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"


def _id_dtype(spec: TokenizerSpec) -> np.dtype:
    return id_dtype_for_vocab(spec.vocab_size)


class _CountingFn(beam.DoFn):
    """A DoFn that reports its units' counts and stage times as Beam metrics."""

    def __init__(self) -> None:
        self._counters = {name: Metrics.counter(METRICS_NAMESPACE, name) for name in m.INPUT_COUNT_NAMES}
        self._stage_ms = {stage: Metrics.counter(METRICS_NAMESPACE, f"{STAGE_MS_PREFIX}{stage}")
                          for stage in (STAGE_READ, STAGE_QUALITY, STAGE_TOKENIZE, STAGE_WRITE_PARTS)}

    def _count(self, result: UnitResult | None, clock: StageClock | None = None) -> UnitResult | None:
        for name, value in (result.counts.items() if result else ()):
            self._counters[name].inc(value)
        for stage, seconds in (clock.seconds.items() if clock else ()):
            self._stage_ms[stage].inc(int(1000 * seconds))
        return result


class _TokenizerFn(_CountingFn):
    """A DoFn holding the tokenizer and the row layout, built once per worker: the tokenizer at the
    first element (a DoFn that gets none, as the input-split tokenizer in most runs, never builds one)."""

    def __init__(self, spec: SpecFile, context: UnitContext, tokenizer_threads: int | None) -> None:
        super().__init__()
        self._spec_file = spec
        self._context = context
        self._config = context.config
        self._tokenizer_threads = tokenizer_threads

    def setup(self) -> None:
        if self._tokenizer_threads and "RAYON_NUM_THREADS" not in os.environ:
            # Set before the tokenizer's first batch starts its thread pool: worker processes
            # sharing the cores should not each start one thread per core.
            os.environ["RAYON_NUM_THREADS"] = str(self._tokenizer_threads)
        self._spec = self._spec_file.load()
        self._built = None

    @property
    def _worker_context(self) -> UnitContext:
        if self._built is None:
            # One at a time: worker threads start together, and the second then finds the family's
            # tables built (cached per process) instead of building them again on the other core.
            with _SETUP_LOCK:
                tokenizer = build_tokenizer(self._spec)
                if self._config.tokenizer_backend == BACKEND_FAST:
                    tokenizer = FastTokenizer(tokenizer, self._spec.json)
                self._built = self._context.with_tokenizer(tokenizer)
        return self._built

    def _failed(self, source: str, error: BaseException) -> WorkFailed:
        """The WorkFailed naming the input for what tokenizing it raised, and the tokenizer too when
        its Rust code panicked (pyo3's PanicException, a BaseException: uncaught, a Rust backtrace)."""
        if is_panic(error) or isinstance(error, TokenizerPanic):
            return WorkFailed(f"input {source}", panic_error(error, self._config.tokenizer))
        return WorkFailed(f"input {source}", error)


NUL = "\0"  # never in a path: a name made of several inputs' is apart from any one input's


def _band_file(temp_dir: str, sources: list[str]) -> str:
    """The file of a work unit's packed bands (`band_packs.write_band_file`), named by its inputs."""
    return f"{unit_file_stem(temp_dir, NUL.join(['bands', *sources]))}-bands.bin"


def _job_outputs(results: list[UnitResult], pack_bands: bool, temp_dir: str = "", sources: list[str] = (),
                band_file: str = "") -> Iterator[UnitResult | SpillRef | tuple[int, BandSlice | None]]:
    """With `pack_bands` (as `Preprocess` runs it), whole inputs' results in one spill file named by
    the unit's `sources` (`input_spills`: only its reference goes on), their packed bands after
    them as (partition, slice of `band_file`), one a partition for all (`near.result_bands`,
    `band_packs.write_band_file`); a byte range's result as it is, with its signature: its file's
    ranges are merged first. Else the results as they are."""
    if not pack_bands:
        yield from results
        return
    packs, whole = [], []
    for result in results:
        if result.file:
            yield result
            continue
        if result.signature:
            packs.extend(result_bands(result))
        whole.append((result.input, [_compact(result)]))
    ref = write_spill(temp_dir, sources, whole)
    if ref is not None:
        yield ref
    yield from write_band_file(band_file, packs)


class _ProcessUnitFn(_TokenizerFn):
    def __init__(self, spec: SpecFile, context: UnitContext, tokenizer_threads: int | None,
                 pack_bands: bool = False) -> None:
        super().__init__(spec, context, tokenizer_threads)
        self._pack_bands = pack_bands

    def process(self, unit: WorkUnit | UnitGroup | GroupFile):
        context = self._worker_context
        clock = StageClock()
        if isinstance(unit, GroupFile):
            try:
                unit = read_group_file(unit)
            except Exception as error:
                raise WorkFailed(f"group file {unit.file} (of {unit.source} and the next {unit.inputs - 1} inputs)",
                                 error) from error
        if isinstance(unit, UnitGroup):
            try:
                results = process_group(unit, context, clock)
            except InputFailed as failed:
                raise self._failed(failed.source, failed.error) from failed.error
            counted = [self._count(result, clock if index == 0 else None) for index, result in enumerate(results)]
            sources = [u.source for u in unit.units]
            yield from _job_outputs(counted, self._pack_bands, context.temp_dir, sources,
                                    _band_file(context.temp_dir, sources))
            return
        try:
            outcome = (scan_for_splits if unit.split_bytes else process_unit)(unit, context, clock)
        except Exception as error:
            raise self._failed(unit.source, error) from error
        except BaseException as error:
            if not is_panic(error):  # an interrupt, an exit
                raise
            raise self._failed(unit.source, error) from None
        if isinstance(outcome, UnitResult):
            yield from _job_outputs([self._count(outcome, clock)], self._pack_bands, context.temp_dir, [unit.source],
                                    _band_file(context.temp_dir, [unit.source]))
            return
        self._count(None, clock)  # the scan of a split input; its counts come with the stitched result
        yield from outcome  # SplitTasks
        if self._pack_bands:  # every partition among the shuffle's keys, whatever the inputs
            yield from write_band_file("", ())


class _TokenizeRangeFn(_TokenizerFn):
    def process(self, task):
        context = self._worker_context
        try:
            tokens = tokenize_split(task, context)
        except Exception as error:
            raise self._failed(task.source, error) from error
        except BaseException as error:
            if not is_panic(error):  # an interrupt, an exit
                raise
            raise self._failed(task.source, error) from None
        yield task.unit.source, tokens


class _StitchRangesFn(_CountingFn):
    """Needs the row layout, not the tokenizer (whose spec would be one more copy in the job graph)."""

    def __init__(self, context: UnitContext) -> None:
        super().__init__()
        self._context = context

    def process(self, source_and_ranges):
        source, ranges = source_and_ranges
        try:
            result = stitch_splits(list(ranges), self._context)
        except Exception as error:
            raise WorkFailed(f"input {source}", error) from error
        yield self._count(result)  # with its signature: WriteShards packs its bands (a rare, large input)


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: SpecFile, config: PreprocessConfig) -> None:
        self._spec_file = spec
        self._config = config
        self._shards_written = Metrics.counter(METRICS_NAMESPACE, "shards_written")
        self._shard_ms = Metrics.counter(METRICS_NAMESPACE, f"{STAGE_MS_PREFIX}{STAGE_SHARDS}")

    def setup(self) -> None:
        c = self._config
        self._spec = self._spec_file.load()
        self._rule = self._spec.masking_rule(c.mlm_probability, c.mask_replace_prob, c.random_replace_prob,
                                             c.masking_unit, c.span_p, c.max_span)

    def process(self, task: ShardTask | SpilledTask):
        seconds: dict[str, float] = {}
        try:
            result = write_shard(load_task(task), self._config, self._rule, _id_dtype(self._spec), seconds)
        except Exception as error:
            raise WorkFailed(f"{task.split} shard {task.index}", error) from error
        self._shards_written.inc()
        self._shard_ms.inc(int(1000 * seconds.get(STAGE_SHARDS, 0.0)))
        yield result


def _unit_size(unit) -> int:
    return unit.size


def _unit_source(unit) -> str:
    return unit.source


def _shard_rows(task: ShardTask | SpilledTask) -> int:
    return task.rows if isinstance(task, SpilledTask) else sum(piece.stop - piece.start for piece in task.slices)


def _shard_path(task: ShardTask | SpilledTask) -> str:
    return task.path


GROUP_KEYS = 256  # where no step sees every unit, small inputs are grouped among those of one of these keys


def _group_key(unit) -> tuple[int, Any]:
    """A stable key of GROUP_KEYS for a small input (a hash of its path), -1 for any other unit."""
    if not groupable(unit):
        return -1, unit
    digest = hashlib.sha256(unit.source.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "big") % GROUP_KEYS, unit


def _groups_of_key(kv, max_inputs: int, max_bytes: int):
    """The units of one key in groups as they come (a runner may stream a key's values: bounded
    memory), the other units alone."""
    key, units = kv
    if key < 0:
        yield from units
        return
    small: list[WorkUnit] = []
    size = 0
    for unit in units:
        small.append(unit)
        size += unit.size
        if len(small) >= max_inputs or size >= max_bytes:
            yield from group_units(small, max_inputs, max_bytes)
            small, size = [], 0
    yield from group_units(small, max_inputs, max_bytes)


class SpreadUnits(beam.PTransform):
    """Spread work units (or any elements, by the `size` and `key` given) over workers: evenly by
    size into `n_bins` groups when the worker count is known (the local runner hands each worker a
    fixed share of a stage's input, so a random spread leaves one worker finishing alone), else a
    plain Reshuffle (cloud runners balance dynamically). With `group_inputs` above 1, small whole
    files are first grouped (`work_units.group_units`), up to that many and `group_bytes` a group."""

    def __init__(self, *, n_bins: int | None, size: Callable[[Any], int] = _unit_size,
                 key: Callable[[Any], str] = _unit_source, group_inputs: int = 1, group_bytes: int = 0) -> None:
        super().__init__()
        if n_bins is not None and n_bins < 1:
            raise ValueError(f"n_bins must be >= 1, got {n_bins}")
        self._n_bins = n_bins
        self._size = size
        self._key = key
        self._group = (group_inputs, group_bytes)

    def expand(self, units):
        group_inputs, group_bytes = self._group
        if self._n_bins is None:
            if group_inputs > 1:
                # No finish_bundle output (Beam's Dask runner drops it): a GroupByKey on 256 keys.
                units = (units
                         | "GroupKeys" >> beam.Map(_group_key)
                         | "ByGroupKey" >> beam.GroupByKey()
                         | "GroupSmallInputs" >> beam.FlatMap(_groups_of_key, max_inputs=group_inputs,
                                                              max_bytes=group_bytes))
            return units | "Reshuffle" >> beam.Reshuffle()
        n_bins, size, key = self._n_bins, self._size, self._key

        def bins(kv):
            items = list(kv[1])
            if group_inputs > 1:
                items = group_units(items, group_inputs, group_bytes, n_bins)
            return enumerate(balanced_bins(items, n_bins, size=size, key=key))

        return (
            units
            | "Together" >> beam.Map(lambda unit: (None, unit))
            | "AllUnits" >> beam.GroupByKey()
            | "Bin" >> beam.FlatMap(bins)
            | "GroupBins" >> beam.GroupByKey()
            | "Unbin" >> beam.FlatMap(lambda kv: [unit for group in kv[1] for unit in group])
        )


def _is_unit_result(element: object) -> bool:
    """A unit's result, or the reference to a spill file of whole inputs' results (`input_spills`)."""
    return isinstance(element, (UnitResult, SpillRef))


def _is_split_task(element: object) -> bool:
    return isinstance(element, SplitTask)


def _is_band_pack(element: object) -> bool:
    """(partition, slice of a band file) of a work unit's inputs (`band_packs.write_band_file`)."""
    return isinstance(element, tuple)


class TokenizeAndChunk(beam.PTransform):
    """WorkUnit (or UnitGroup, GroupFile) -> UnitResult: read, clean, tokenize and chunk each input
    into unmasked part files. A large text input marked for splitting is scanned by one worker, its
    input splits tokenized by many, and its rows stitched by one (`input_splits`).

    With `pack_bands` (as `Preprocess` runs it), the output is (results, bands, stitched). Whole
    inputs' results do not come as elements: a worker writes a unit's to one spill file
    (`input_spills`, without their MinHash signatures, which stay in their records in `temp_dir`
    for the few `WriteShards` scores) and the first PCollection has its `SpillRef`, beside the
    results of byte ranges (with their signatures: a file's ranges are merged first). The packed
    bands come in the second PCollection as (partition, slice of a band file), straight from the
    workers' stage (a Flatten of them with the results would be one more copy on the local runner).
    `stitched` holds the results of the inputs read as input splits (with their signatures). `temp_dir`
    must then be WriteShards' (its config's output's TEMP_DIR), where it reads all of these back."""

    def __init__(self, *, spec: TokenizerSpec, config: PreprocessConfig, temp_dir: str,
                 local_workers: int | None = None, tokenizer_threads: int | None = None,
                 group_inputs: int = DEFAULT_GROUP_INPUTS, pack_bands: bool = False) -> None:
        super().__init__()
        if not temp_dir:
            raise ValueError("temp_dir is required")
        if group_inputs < 1:
            raise ValueError(f"--group_inputs must be >= 1, got {group_inputs}")
        self._args = (ship_spec(spec, temp_dir), UnitContext.from_spec(spec, config, temp_dir), tokenizer_threads)
        self._local_workers = local_workers
        self._group = (group_inputs, config.split_bytes)
        self._pack_bands = pack_bands

    def expand(self, units):
        # One output holding both kinds (not tagged outputs, which Beam's Dask runner mixes up).
        group_inputs, group_bytes = self._group
        processed = (units | "SpreadUnits" >> SpreadUnits(n_bins=self._local_workers, group_inputs=group_inputs,
                                                          group_bytes=group_bytes)
                     | "ProcessUnits" >> beam.ParDo(_ProcessUnitFn(*self._args, pack_bands=self._pack_bands)))
        results = processed | "UnitResults" >> beam.Filter(_is_unit_result)
        stitched = (processed
                    | "Ranges" >> beam.Filter(_is_split_task)
                    | "SpreadRanges" >> SpreadUnits(n_bins=self._local_workers)
                    | "TokenizeRanges" >> beam.ParDo(_TokenizeRangeFn(*self._args))
                    | "GroupRanges" >> beam.GroupByKey()
                    | "StitchRanges" >> beam.ParDo(_StitchRangesFn(self._args[1])))
        if not self._pack_bands:
            return (results, stitched) | "AllUnitResults" >> beam.Flatten()
        # Apart, not flattened: the local runner copies every element of a Flatten of several inputs
        # (the stitched results are a few large inputs; the workers' results are every input).
        return results, processed | "UnitBands" >> beam.Filter(_is_band_pack), stitched


def _is_range_result(result: UnitResult | SpillRef) -> bool:
    """A byte range's result: its file's other ranges have results of their own."""
    return isinstance(result, UnitResult) and bool(result.file)


def _is_spill(element: object) -> bool:
    return isinstance(element, SpillRef)


def _by_input(kv) -> tuple[str, list[UnitResult]]:
    """An input's results in order (a split file's ranges by source)."""
    name, parts = kv
    return name, sorted(parts, key=lambda r: r.source)


def _compact(result: UnitResult) -> UnitResult:
    """A result as planning and the manifest need it: without its signature (2 KB, for dedup only)."""
    return dataclasses.replace(result, signature="") if result.signature else result


def _spill_input(name_and_parts: tuple[str, list[UnitResult]], temp_dir: str) -> SpillRef:
    """One large input's results (a file read in byte ranges, or stitched from input splits) to a
    spill file of its own (`input_spills`)."""
    name, parts = name_and_parts
    return write_spill(temp_dir, [name], [(name, [_compact(part) for part in parts])])


def _stitched_input(result: UnitResult) -> tuple[str, list[UnitResult]]:
    return result.input, [result]


def _whole_bands(result: UnitResult, temp_dir: str) -> list[tuple[int, bytes]]:
    """The packed bands of a whole input whose result still carries its signature (not packed by
    its worker): the signature to its own file in `temp_dir`."""
    return input_bands((result.source, [result]), temp_dir) if result.signature else []


def _planned_tasks(kv, temp_dir: str, inputs_per_task: int) -> list[BucketTask]:
    return plan_tasks(kv[1], temp_dir, inputs_per_task)


def _task_size(task: BucketTask) -> int:
    return task.hi - task.lo


def _task_key(task: BucketTask) -> str:
    return f"{task.index:06d}"


def _bucket_item(tagged: tuple[str, Any]) -> list[tuple[str, tuple[str, Any]]]:
    """(bucket, (tag, value)) of a bucket task's bucket spill or other bucket's plan record."""
    tag, value = tagged
    if tag == TAG_BUCKET:
        return [(value[0], (tag, value))]
    if tag == TAG_RECORD:
        return [(value[0], (tag, value[1]))]
    return []


def _tagged(tag: str):
    return lambda tagged: [tagged[1]] if tagged[0] == tag else []


def _together(tag: str):
    return lambda element: (None, (tag, element))


def _row_summary(kv) -> RowSummary:
    return row_summary(entry for entry in kv[1] if entry is not None)


def _shard_task(joined, config: PreprocessConfig, temp_dir: str) -> SpilledTask:
    """A shard's task from its pieces, its slices to a file of `temp_dir` (one an input: the tasks
    are spread over the workers through two more shuffles)."""
    (split, index), group = joined
    return spill_task(shard_task(split, index, next(iter(group["count"])), read_pieces(group["pieces"]), config),
                      temp_dir)


def _finalize(kv, config: PreprocessConfig, tokenizer_info: dict, id_dtype: np.dtype, spec: SpecFile) -> dict:
    tagged: dict[str, list] = {"totals": [], "run": [], "shard": []}
    for tag, element in kv[1]:
        tagged[tag].append(element)
    return finalize_output(add_totals(tagged["totals"]), tagged["run"], tagged["shard"], config, tokenizer_info,
                           id_dtype, spec.load().json)


def _run_task(task: BucketTask, roots: RootsRef | None, **options) -> Iterator[tuple[str, object]]:
    """`input_tasks.run_task` with the near-duplicate roots' table its reference names."""
    return run_task(task, roots=read_roots(roots), **options)


class WriteShards(beam.PTransform):
    """TokenizeAndChunk(pack_bands=True)'s output -> one manifest dict: mark duplicates, plan shards,
    mask and write them in parallel, then finalize.

    No input's results go through a shuffle but a file read in byte ranges' (a few large inputs):
    the workers spill them (`input_spills`), and the end of the job reads them back in bucket tasks
    of about INPUTS_PER_TASK inputs each (`input_tasks`), which mark the exact duplicates where they
    meet, drop the near duplicates (`NearDuplicateRoots`: a reference to the roots' table as a side
    input) and write their buckets' plan records and their run of inputs-file lines. Through the
    runner go only small things: a reference a spill file and a task, a bucket's spill (at most
    4,096), rows per bucket, references to the near-duplicate search's files (its pairs, report runs
    and edges, and with --dedup the twins' files and table), the shards' pieces, the totals;
    the last step merges the sorted runs into INPUTS_FILE and writes the manifest."""

    def __init__(self, *, spec: TokenizerSpec, config: PreprocessConfig, local_workers: int | None = None,
                 inputs_per_task: int = INPUTS_PER_TASK) -> None:
        super().__init__()
        self._spec = spec
        self._config = config
        self._local_workers = local_workers
        self._inputs_per_task = inputs_per_task

    def expand(self, unit_results):
        """`unit_results`: (results and spill references, packed bands, stitched results), as
        TokenizeAndChunk(pack_bands=True) gives them."""
        if not isinstance(unit_results, tuple):
            raise TypeError("WriteShards takes TokenizeAndChunk(pack_bands=True)'s (results, bands, stitched)")
        spec, config = self._spec, self._config
        unit_results, worker_bands, stitched = unit_results
        temp_dir = posixpath.join(config.output, m.TEMP_DIR)
        shipped = ship_spec(spec, temp_dir)
        id_dtype = _id_dtype(spec)
        bytes_per_row = row_bytes(config.max_seq_length, _id_dtype(spec), config.masking)
        # Only a file read in byte ranges has more than one result to gather: its ranges' results
        # (with their signatures) meet by input; every whole input's result is in a spill file.
        ranged = (unit_results
                  | "RangeResults" >> beam.Filter(_is_range_result)
                  | "ByInput" >> beam.Map(lambda r: (r.input, r))
                  | "GroupInputs" >> beam.GroupByKey()
                  | "InputParts" >> beam.Map(_by_input))
        later_bands = ((ranged | "RangedBands" >> beam.FlatMap(input_bands, temp_dir=temp_dir),
                        stitched | "StitchedBands" >> beam.FlatMap(_whole_bands, temp_dir=temp_dir))
                       | "LaterBands" >> beam.Flatten())
        # The workers' packs go to the shuffle from their own stage; the few packed here (inputs
        # over --split_bytes) join them as a side input.
        pairs = (worker_bands, later_bands) | "NearDuplicateCandidates" >> FindNearDuplicateCandidates(temp_dir)
        # Every spill file's reference (and one None: a task even with no input), then the tasks.
        seed = unit_results.pipeline | "NoSpillYet" >> beam.Create([None])
        tasks = ((unit_results | "WorkersSpills" >> beam.Filter(_is_spill),
                  ranged | "SpillRanged" >> beam.Map(_spill_input, temp_dir=temp_dir),
                  stitched | "SpillStitched" >> beam.Map(lambda r: _spill_input(_stitched_input(r), temp_dir)),
                  seed)
                 | "Spills" >> beam.Flatten()
                 | "SpillsTogether" >> beam.Map(lambda ref: (None, ref))
                 | "GroupSpills" >> beam.GroupByKey()
                 | "PlanTasks" >> beam.FlatMap(_planned_tasks, temp_dir=temp_dir, inputs_per_task=self._inputs_per_task)
                 | "SpreadTasks" >> SpreadUnits(n_bins=self._local_workers, size=_task_size, key=_task_key))
        # --dedup drops the exact duplicates, whose pairs are then not scored: they come first.
        chunk = self._inputs_per_task  # what a task holds, whatever the copies of one content in it
        twins = None
        if config.dedup:  # in files, merged into one table the scoring maps: not one element a twin
            paired = pairs | "PairBuckets" >> beam.Map(lambda bucket_and_slices: bucket_and_slices[0])  # 32 at most
            twins = (tasks
                     | "TwinFiles" >> beam.FlatMap(spill_twins, temp_dir=temp_dir, chunk=chunk,
                                                   paired=beam.pvalue.AsIter(paired))
                     | "TwinsTogether" >> beam.Map(lambda piece: (None, piece))
                     | "GroupTwinFiles" >> beam.GroupByKey()
                     | "TwinTable" >> beam.Map(write_twin_table, temp_dir=temp_dir))
        roots, near_runs = ((pairs if twins is None else (pairs, twins))
                            | "NearDuplicateRoots" >> NearDuplicateRoots(config.near_dedup, temp_dir,
                                                                         drop_twins=config.dedup))
        roots_side = beam.pvalue.AsSingleton(roots, default_value=None) if roots is not None else None
        done = tasks | "BucketTasks" >> beam.FlatMap(_run_task, temp_dir=temp_dir, drop=config.dedup,
                                                     roots=roots_side, threshold=config.near_dedup, chunk=chunk)
        # A bucket's spill, with the plan records other tasks found for it (byte ranges'), merged.
        buckets = (done
                   | "BucketItems" >> beam.FlatMap(_bucket_item)
                   | "GroupBuckets" >> beam.GroupByKey()
                   | "SpillBuckets" >> beam.Map(merge_bucket, temp_dir=temp_dir))
        # One summary even when no input has rows (each split then gets one empty shard).
        seed = unit_results.pipeline | "NoRowsYet" >> beam.Create([(None, None)])
        summary = ((buckets | "BucketRows" >> beam.Map(spilled_rows) | "RowsTogether" >> beam.Map(lambda e: (None, e)),
                    seed)
                   | "AllRows" >> beam.Flatten()
                   | "GroupRows" >> beam.GroupByKey()
                   | "RowSummary" >> beam.Map(_row_summary))
        counts = summary | "ShardKeys" >> beam.FlatMap(shard_keys, config=config, bytes_per_row=bytes_per_row)
        pieces = buckets | "BucketPieces" >> beam.FlatMap(
            spilled_pieces, summary=beam.pvalue.AsSingleton(summary), config=config, bytes_per_row=bytes_per_row)
        shards = (
            {"count": counts, "pieces": pieces}
            | "GatherShards" >> beam.CoGroupByKey()
            | "PlanShards" >> beam.Map(_shard_task, config=config, temp_dir=temp_dir)
            # By rows, as the units are: a random spread of 2 large shards over 2 workers gives one both.
            | "SpreadShards" >> SpreadUnits(n_bins=self._local_workers, size=_shard_rows, key=_shard_path)
            | "WriteShard" >> beam.ParDo(_WriteShardFn(shipped, config))
        )
        tokenizer_info = tokenizer_record(spec, config.tokenizer)
        # The finalize step gets small things only: the totals (one a task, combined per key, lifted
        # before the shuffle: a CombineGlobally would be a side input), the shards' results and the
        # paths of the sorted runs of lines it merges into INPUTS_FILE.
        totals = (done | "TaskTotals" >> beam.FlatMap(_tagged(TAG_TOTALS))
                  | "TotalsByKey" >> beam.Map(lambda t: (None, t))
                  | "Totals" >> beam.CombinePerKey(add_totals)
                  | "TotalsOnly" >> beam.Values())
        runs = done | "TaskRuns" >> beam.FlatMap(_tagged(TAG_RUN))
        return (
            (totals | "TagTotals" >> beam.Map(_together("totals")),
             runs | "TagRuns" >> beam.Map(_together("run")),
             near_runs | "TagNearRuns" >> beam.Map(_together("run")),
             shards | "TagShards" >> beam.Map(_together("shard")))
            | "Everything" >> beam.Flatten()
            | "Together" >> beam.GroupByKey()
            | "Finalize" >> beam.Map(_finalize, config=config, tokenizer_info=tokenizer_info, id_dtype=id_dtype,
                                     spec=shipped)
        )


def tokenizer_record(spec: TokenizerSpec, name: str) -> dict:
    return {
        m.KEY_NAME_OR_PATH: name,
        m.KEY_SHA256: spec.fingerprint,
        m.KEY_VOCAB_SIZE: spec.vocab_size,
        m.KEY_SPECIAL_IDS: {o.SPECIAL_CLS: spec.cls_id, o.SPECIAL_SEP: spec.sep_id, o.SPECIAL_PAD: spec.pad_id,
                            m.KEY_MASK_ID: spec.mask_id},
        m.KEY_NEVER_SELECTED: list(spec.special_ids),
        m.KEY_NEVER_REPLACEMENT: list(spec.unused_ids),
        m.KEY_CONTINUATION: list(spec.continuation_ids),
        o.KEY_ID_DTYPE: _id_dtype(spec).name,
    }


def _listed(patterns: tuple[str, ...], split_bytes: int, output: str, split_text: bool, group_inputs: int,
            group_bytes: int, n_bins: int | None) -> Iterator[WorkUnit | GroupFile]:
    """The units of every pattern (a file two match once: `listed_inputs.InputListing`), large files
    split or marked for splitting, small ones in groups written to group files (`group_files`), as
    the files are listed: the lister never holds the listing."""
    listing = InputListing(list(patterns), output)
    units = iter_split_large_inputs(listing, split_bytes, split_text)
    temp_dir = posixpath.join(output, m.TEMP_DIR)
    for item in iter_groups(units, group_size(group_inputs, listing.files, n_bins), group_bytes):
        yield write_group_file(temp_dir, item) if isinstance(item, UnitGroup) else item


class ListInputs(beam.PTransform):
    """`--input` patterns -> WorkUnits, listed by a worker: only the patterns travel in the job graph
    (a graph carrying 100,000 listed files is megabytes; Dataflow refuses about 10 MB). A file two
    patterns match is one unit; large files are split or marked for splitting. With `group_inputs`
    above 1, small files come in groups (`work_units.group_units`, up to that many and
    `group_bytes` a group, at least 4 a worker of `n_bins`), each as a reference to its group file:
    no element, shuffle or worker past the lister holds the listing. One worker lists every
    pattern: a shuffle of every unit by its source, to keep a file two patterns match once, was one
    more copy of the listing in the local runner's memory."""

    def __init__(self, patterns: list[str], split_bytes: int, output: str, split_text: bool = True,
                 group_inputs: int = 1, group_bytes: int = 0, n_bins: int | None = None) -> None:
        super().__init__()
        self._patterns = tuple(sorted(set(patterns)))
        self._split_bytes = split_bytes
        self._output = output
        self._split_text = split_text
        self._group = (group_inputs, group_bytes, n_bins)

    def expand(self, root):
        group_inputs, group_bytes, n_bins = self._group
        return (root
                | "Patterns" >> beam.Create([self._patterns])
                | "Match" >> beam.FlatMap(_listed, split_bytes=self._split_bytes, output=self._output,
                                          split_text=self._split_text, group_inputs=group_inputs,
                                          group_bytes=group_bytes, n_bins=n_bins))


class Preprocess(beam.PTransform):
    """The whole job from a root: the inputs (`patterns` listed in the pipeline, plus listed
    `units` such as dataset row ranges) to shards and a manifest (a PCollection of one dict)."""

    def __init__(self, *, units: list[WorkUnit], spec: TokenizerSpec, config: PreprocessConfig,
                 local_workers: int | None = None, tokenizer_threads: int | None = None,
                 patterns: list[str] | tuple[str, ...] = (), group_inputs: int = DEFAULT_GROUP_INPUTS,
                 inputs_per_task: int = INPUTS_PER_TASK) -> None:
        super().__init__()
        self._group_inputs = group_inputs
        self._inputs_per_task = inputs_per_task
        if not units and not patterns:
            raise ValueError("no input units or patterns")
        self._units = units
        self._patterns = list(patterns)
        self._spec = spec
        self._config = config
        self._local_workers = local_workers
        self._tokenizer_threads = tokenizer_threads

    def expand(self, root):
        temp_dir = posixpath.join(self._config.output, m.TEMP_DIR)
        sources = []
        if self._patterns:
            split_text = no_cut_reason(self._spec.json) is None  # no proven cut: text inputs stay whole
            sources.append(root | "ListInputs" >> ListInputs(self._patterns, self._config.split_bytes,
                                                                 self._config.output, split_text,
                                                                 group_inputs=self._group_inputs,
                                                                 group_bytes=self._config.split_bytes,
                                                                 n_bins=self._local_workers))
        if self._units:
            sources.append(root | "ListedUnits" >> beam.Create(self._units))
        units = sources[0] if len(sources) == 1 else tuple(sources) | "AllUnits" >> beam.Flatten()
        return (
            units
            | "TokenizeAndChunk" >> TokenizeAndChunk(spec=self._spec, config=self._config, temp_dir=temp_dir,
                                                    local_workers=self._local_workers,
                                                    tokenizer_threads=self._tokenizer_threads,
                                                    group_inputs=self._group_inputs, pack_bands=True)
            | "WriteShards" >> WriteShards(spec=self._spec, config=self._config, local_workers=self._local_workers,
                                           inputs_per_task=self._inputs_per_task)
        )


def stage_seconds(result) -> dict[str, float]:
    """Worker seconds per stage of a finished run, from its metrics ({} where the runner has none)."""
    from apache_beam.metrics.metric import MetricsFilter

    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    except (AttributeError, KeyError, NotImplementedError):
        return {}
    out: dict[str, float] = {}
    for counter in counters:
        name = counter.key.metric.name
        if name.startswith(STAGE_MS_PREFIX):
            value = counter.committed if counter.committed is not None else counter.attempted
            out[name[len(STAGE_MS_PREFIX):]] = out.get(name[len(STAGE_MS_PREFIX):], 0.0) + (value or 0) / 1000
    return out


# What the shuffles' packed results hold (`pipeline.beam.packed`).
allow(_unpickled_result)
