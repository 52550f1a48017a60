"""A unit's rows written into its train and validation part files as they are made."""

from __future__ import annotations

import numpy as np

from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.unit_results import part_path
from pipeline.beam.writing.arrow_io import AtomicArrowWriter, part_batch
from pipeline.kernels.common.hashing import mask_seeds, row_keys, validation_rows
from pipeline.kernels.rows.chunking import Chunks, RowLayout, RowStream
from schemas import manifest as m
from schemas.options import VALIDATION_BY_DOCUMENT
from schemas.shard import ROWS_PER_RECORD_BATCH, part_schema


class PartWriter:
    """A unit's rows into its train and validation parts as they are made: seeds and the split of
    each row from its key, record batches of ROWS_PER_RECORD_BATCH rows (bounded memory)."""

    def __init__(self, temp_dir: str, source: str, layout: RowLayout, id_dtype: np.dtype,
                 config: PreprocessConfig) -> None:
        self._temp_dir = temp_dir
        self._source = source
        self._schema = part_schema(layout.seq_len, id_dtype)
        self._config = config
        self._writers: dict[str, AtomicArrowWriter] = {}
        self._pending: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {m.TRAIN: [], m.VALIDATION: []}
        self._pending_rows = dict.fromkeys(self._pending, 0)

    def add(self, chunks: Chunks, stream: RowStream, document_key: np.uint64) -> None:
        """Rows just made by `stream` (whose content key is `document_key`)."""
        n = chunks.rows.shape[0]
        if not n:
            return
        keys = row_keys(document_key, n, first=stream.rows - n)
        seeds = mask_seeds(keys, self._config.seed)
        # By row, rows of one book land in both splits (an optimistic validation loss); by document, a
        # document's content key sends all its rows one way (with --packing concat: the rows' group).
        by_document = self._config.validation_unit == VALIDATION_BY_DOCUMENT
        split_keys = np.full(n, document_key, dtype=np.uint64) if by_document else keys
        in_validation = validation_rows(split_keys, self._config.validation_fraction)
        for split, selector in ((m.TRAIN, ~in_validation), (m.VALIDATION, in_validation)):
            if selector.any():
                self._pending[split].append((chunks.rows[selector], chunks.lengths[selector], seeds[selector]))
                self._pending_rows[split] += int(selector.sum())
                self._flush(split, final=False)

    def _flush(self, split: str, final: bool) -> None:
        pending = self._pending[split]
        if not pending or (not final and self._pending_rows[split] < ROWS_PER_RECORD_BATCH):
            return
        rows, lengths, seeds = (np.concatenate(column) for column in zip(*pending))
        whole = len(rows) if final else len(rows) // ROWS_PER_RECORD_BATCH * ROWS_PER_RECORD_BATCH
        if split not in self._writers:
            self._writers[split] = AtomicArrowWriter(part_path(self._temp_dir, self._source, split), self._schema,
                                                     random_access=True)
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
