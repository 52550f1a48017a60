"""A unit's rows written into its train and validation part files as they are made; the rows of a
group of small inputs one input after another into one pair of part files (`MemberWriter`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.unit_results import part_path
from pipeline.beam.writing.arrow_io import AtomicArrowWriter, part_batch
from pipeline.kernels.common.hashing import mask_seeds, row_keys, validation_rows
from pipeline.kernels.rows.chunking import Chunks, RowLayout, RowStream
from schemas import manifest as m
from schemas.options import VALIDATION_BY_DOCUMENT
from schemas.shard import ROWS_PER_RECORD_BATCH, part_schema

Pending = tuple[np.ndarray, np.ndarray, np.ndarray]  # rows, lengths, seeds


def split_rows(chunks: Chunks, stream: RowStream, document_key: np.uint64,
               config: PreprocessConfig) -> Iterator[tuple[str, Pending]]:
    """(split, (rows, lengths, seeds)) of rows just made by `stream`: seeds and the split of each
    row from its key."""
    n = chunks.rows.shape[0]
    if not n:
        return
    keys = row_keys(document_key, n, first=stream.rows - n)
    seeds = mask_seeds(keys, config.seed)
    # By row, rows of one book land in both splits (an optimistic validation loss); by document, a
    # document's content key sends all its rows one way (with --packing concat: the rows' group).
    by_document = config.validation_unit == VALIDATION_BY_DOCUMENT
    split_keys = np.full(n, document_key, dtype=np.uint64) if by_document else keys
    in_validation = validation_rows(split_keys, config.validation_fraction)
    for split, selector in ((m.TRAIN, ~in_validation), (m.VALIDATION, in_validation)):
        if selector.any():
            yield split, (chunks.rows[selector], chunks.lengths[selector], seeds[selector])


class PartWriter:
    """A unit's rows into its train and validation parts as they are made, in record batches of
    ROWS_PER_RECORD_BATCH rows (bounded memory). The parts are named from `source` (a unit's, or
    the sources a group writes joined)."""

    def __init__(self, temp_dir: str, source: str, layout: RowLayout, id_dtype: np.dtype,
                 config: PreprocessConfig) -> None:
        self._temp_dir = temp_dir
        self._source = source
        self._schema = part_schema(layout.seq_len, id_dtype)
        self._config = config
        self._writers: dict[str, AtomicArrowWriter] = {}
        self._pending: dict[str, list[Pending]] = {m.TRAIN: [], m.VALIDATION: []}
        self._pending_rows = dict.fromkeys(self._pending, 0)
        self.rows = dict.fromkeys(self._pending, 0)  # rows added per split so far
        self.starts: dict[str, int] = {}  # a unit's own parts start at row 0
        self._paths: dict[str, str] = {}  # a group's name is all its sources: hashed once, not a member

    def add(self, chunks: Chunks, stream: RowStream, document_key: np.uint64) -> None:
        """Rows just made by `stream` (whose content key is `document_key`)."""
        for split, rows in split_rows(chunks, stream, document_key, self._config):
            self.append(split, [rows])

    def append(self, split: str, pending: list[Pending]) -> None:
        """Rows already split and seeded, after those added before."""
        for rows in pending:
            self._pending[split].append(rows)
            self._pending_rows[split] += len(rows[0])
            self.rows[split] += len(rows[0])
        self._flush(split, final=False)

    def path(self, split: str) -> str:
        if split not in self._paths:
            self._paths[split] = part_path(self._temp_dir, self._source, split)
        return self._paths[split]

    def _flush(self, split: str, final: bool) -> None:
        pending = self._pending[split]
        if not pending or (not final and self._pending_rows[split] < ROWS_PER_RECORD_BATCH):
            return
        rows, lengths, seeds = (np.concatenate(column) for column in zip(*pending))
        whole = len(rows) if final else len(rows) // ROWS_PER_RECORD_BATCH * ROWS_PER_RECORD_BATCH
        if split not in self._writers:
            self._writers[split] = AtomicArrowWriter(self.path(split), self._schema, random_access=True)
        for start in range(0, whole, ROWS_PER_RECORD_BATCH):
            stop = min(start + ROWS_PER_RECORD_BATCH, whole)
            self._writers[split].write(part_batch(rows[start:stop], lengths[start:stop], seeds[start:stop],
                                                  self._schema))
        self._pending[split] = [(rows[whole:], lengths[whole:], seeds[whole:])] if whole < len(rows) else []
        self._pending_rows[split] = len(rows) - whole

    def close(self) -> dict[str, tuple[str, int]]:
        """Finish the parts: split -> (part path, rows); a split without rows has no part."""
        for split in self._pending:
            self._flush(split, final=True)
        return {split: (writer.path, writer.close().rows) for split, writer in self._writers.items()}

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()
        self._writers = {}


class MemberWriter:
    """One input's rows in a group: held until the input is done (a small input's rows, a few MB at
    most), then `commit`ted after the rows of the group's earlier inputs, or dropped by `abort` (a
    gate or a change keeps the input out): the group's parts hold only the rows of inputs kept."""

    def __init__(self, group: PartWriter, config: PreprocessConfig) -> None:
        self._group = group
        self._config = config
        self._pending: dict[str, list[Pending]] = {m.TRAIN: [], m.VALIDATION: []}
        self.starts: dict[str, int] = {}

    def add(self, chunks: Chunks, stream: RowStream, document_key: np.uint64) -> None:
        for split, rows in split_rows(chunks, stream, document_key, self._config):
            self._pending[split].append(rows)

    def close(self) -> dict[str, tuple[str, int]]:
        """split -> (the group's part path, this input's rows), and where its rows start in each
        part (`starts`), as they will be once committed."""
        parts = {}
        for split, pending in self._pending.items():
            rows = sum(len(p[0]) for p in pending)
            if rows:
                parts[split] = (self._group.path(split), rows)
                self.starts[split] = self._group.rows[split]
        return parts

    def commit(self) -> None:
        for split, pending in self._pending.items():
            if pending:
                self._group.append(split, pending)
        self.abort()

    def abort(self) -> None:
        self._pending = {split: [] for split in self._pending}
