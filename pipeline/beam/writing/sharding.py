"""Decide which rows go to which shard (deterministically), and write one shard from the parts.

Row order of a split: static copy 0 of every row, then copy 1, ...; within a copy, inputs sorted by
content key, rows in chunk order. Shard i holds the i-th of N equal contiguous ranges. All of it
depends on content only, so any worker count or input order gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.run.config import NOT_IN_THE_BYTES, PreprocessConfig
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.arrow_io import (
    PartReaders,
    PartRows,
    file_sha256,
    read_text,
    write_stream_atomically,
    write_text,
)
from pipeline.beam.writing.planning import range_pieces, shard_count
from pipeline.kernels.rows.masking import MaskingRule, mask_rows
from pipeline.storage.arrow_files import fixed_list_array, numpy_array
from schemas import manifest as m
from schemas.shard import (
    ATTENTION_DTYPE,
    ATTENTION_MASK,
    INPUT_IDS,
    LABELS,
    MASK_SEED,
    MASKING_STATIC,
    ROWS_PER_RECORD_BATCH,
    shard_columns,
    shard_schema,
)

STAGE_SHARDS = "mask_write_shards"


@dataclass(frozen=True)
class PartSlice:
    """Rows [start, stop) of one input's rows in a part, whose rows begin at row `base` of the part
    (0 but in a group's parts). The plan hash names the input's rows (key, start, stop), never
    where they are stored, so a shard's plan is the same however its inputs were grouped."""

    path: str
    key: str  # content key of the unit the part came from
    start: int
    stop: int
    copy: int
    base: int = 0


@dataclass(frozen=True)
class ShardTask:
    split: str
    index: int
    count: int
    path: str
    slices: tuple[PartSlice, ...]
    plan: str = ""  # hash of the config and the slices' content keys: what the shard's bytes depend on

    @property
    def record_path(self) -> str:
        """Where the finished shard's result is recorded (in the run's temp folder, for --resume)."""
        folder = posixpath.dirname(posixpath.dirname(self.path))
        return posixpath.join(folder, m.TEMP_DIR, m.shard_record_name(self.split, posixpath.basename(self.path)))


@dataclass
class ShardResult:
    split: str
    index: int
    filename: str
    rows: int
    bytes: int
    sha256: str
    mask_counts: dict[str, int] = field(default_factory=dict)
    plan: str = ""


def row_bytes(seq_len: int, id_dtype: np.dtype, masking: str) -> int:
    per_row = {INPUT_IDS: seq_len * id_dtype.itemsize, ATTENTION_MASK: seq_len * ATTENTION_DTYPE.itemsize,
               LABELS: seq_len * id_dtype.itemsize, MASK_SEED: 8}
    return sum(per_row[name] for name in shard_columns(masking))


def config_key(config: PreprocessConfig) -> str:
    """The config as the bytes of a shard depend on it (part of each shard's plan hash)."""
    return json.dumps({k: v for k, v in config.to_record().items() if k not in (*NOT_IN_THE_BYTES, "inputs")},
                      sort_keys=True)


def plan_shards(results: list[UnitResult], config: PreprocessConfig, bytes_per_row: int) -> list[ShardTask]:
    """Every shard of every split, with the part slices it is made of, from all results in one list.
    (The job makes the same plan without that list: `shard_plan`.)"""
    ordered = sorted(results, key=lambda r: r.sort_key)
    configured = config_key(config)
    tasks = []
    for split in m.SPLITS:
        parts = [(r.parts[split][0], r.parts[split][1], r.key, r.part_starts.get(split, 0))
                 for r in ordered if split in r.parts]
        offsets = np.cumsum([0] + [rows for _, rows, _, _ in parts])
        per_copy = int(offsets[-1])
        total = per_copy * config.copies
        count = shard_count(total, bytes_per_row, config.num_shards)
        for index in range(count):
            begin, end = index * total // count, (index + 1) * total // count
            slices = []
            for g in range_pieces(begin, end, per_copy):
                copy, local_begin, local_end = g
                first = int(np.searchsorted(offsets, local_begin, side="right")) - 1
                position = local_begin
                while position < local_end:
                    part_path, _, key, base = parts[first]
                    stop = min(local_end, int(offsets[first + 1]))
                    slices.append(PartSlice(part_path, key, position - int(offsets[first]),
                                            stop - int(offsets[first]), copy, base))
                    position = stop
                    first += 1
            path = posixpath.join(config.output, split, m.shard_name(index, count))
            plan = hashlib.sha256(json.dumps([configured, split, index, count, [
                (piece.key, piece.start, piece.stop, piece.copy) for piece in slices]]).encode()).hexdigest()
            tasks.append(ShardTask(split=split, index=index, count=count, path=path, slices=tuple(slices), plan=plan))
    return tasks


def _slices(task: ShardTask, seq_len: int) -> Iterator[tuple[PartRows, int]]:
    """(rows, copy) of the part slices of the shard, in order and a record batch at a time;
    `_batches` re-cuts them into ROWS_PER_RECORD_BATCH-row record batches."""
    with PartReaders() as parts:
        for piece in task.slices:
            for rows in parts.rows(piece.path, seq_len, piece.base + piece.start, piece.base + piece.stop):
                yield rows, piece.copy


def _batches(task: ShardTask, config: PreprocessConfig, rule: MaskingRule, schema: pa.Schema,
             totals: np.ndarray) -> Iterator[pa.RecordBatch]:
    seq_len = config.max_seq_length
    positions = np.arange(seq_len, dtype=np.int32)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for rows, copy in _slices(task, seq_len):
        # Static: copy k is masked with epoch k. Dynamic: rows stay unmasked; epoch-0 counts are recorded.
        masked, labels, counts = mask_rows(rows.ids, rows.seeds, copy, rule)
        totals += counts
        attention = (positions[None, :] < rows.lengths[:, None]).astype(ATTENTION_DTYPE)
        if config.masking == MASKING_STATIC:
            columns = [fixed_list_array(masked), fixed_list_array(attention), fixed_list_array(labels)]
        else:
            columns = [fixed_list_array(rows.ids), fixed_list_array(attention), numpy_array(rows.seeds)]
        pending.append(pa.record_batch(columns, schema=schema))
        pending_rows += rows.ids.shape[0]
        while pending_rows >= ROWS_PER_RECORD_BATCH:
            table = pa.Table.from_batches(pending, schema=schema)
            yield table.slice(0, ROWS_PER_RECORD_BATCH).combine_chunks().to_batches()[0]
            rest = table.slice(ROWS_PER_RECORD_BATCH)
            pending = rest.combine_chunks().to_batches() if rest.num_rows else []
            pending_rows = rest.num_rows
    if pending_rows:
        yield pa.Table.from_batches(pending, schema=schema).combine_chunks().to_batches()[0]


def _reusable(task: ShardTask) -> ShardResult | None:
    """The shard an interrupted run already finished, if its plan matches and its bytes check out."""
    if not (FileSystems.exists(task.record_path) and FileSystems.exists(task.path)):
        return None
    try:
        result = ShardResult(**json.loads(read_text(task.record_path)))
    except (ValueError, TypeError):
        return None
    if result.plan != task.plan or file_sha256(task.path) != result.sha256:
        return None
    return result


def write_shard(task: ShardTask, config: PreprocessConfig, rule: MaskingRule, id_dtype: np.dtype,
                seconds: dict[str, float] | None = None) -> ShardResult:
    """Gather, mask and write one shard under a temp name, then rename it to its final name.
    A shard finished by an interrupted run with the same plan is kept as it is."""
    reused = _reusable(task)
    if reused is not None:
        return reused
    schema = shard_schema(config.masking, config.max_seq_length, id_dtype)
    totals = np.zeros(4, dtype=np.int64)
    started = time.perf_counter()
    written = write_stream_atomically(task.path, schema, _batches(task, config, rule, schema, totals))
    if seconds is not None:
        seconds[STAGE_SHARDS] = seconds.get(STAGE_SHARDS, 0.0) + time.perf_counter() - started
    result = ShardResult(
        split=task.split, index=task.index, filename=posixpath.basename(task.path), rows=written.rows,
        bytes=written.bytes, sha256=written.sha256,
        mask_counts=dict(zip(m.MASK_COUNT_NAMES, (int(x) for x in totals))), plan=task.plan,
    )
    write_text(task.record_path, json.dumps(asdict(result), sort_keys=True))
    return result
