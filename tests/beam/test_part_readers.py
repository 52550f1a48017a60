"""The shard writers' part readers (#36): a shard takes its rows from every group's part in
content-key order, so a part must stay open across the shard, not be reopened a slice."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.beam.writing import arrow_io
from pipeline.beam.writing.arrow_io import PartReaders, part_batch
from schemas.shard import part_schema

SEQ = 8


def _parts(folder, count: int) -> dict[str, np.ndarray]:
    schema = part_schema(SEQ, np.dtype(np.uint16))
    out = {}
    for i in range(count):
        ids = np.arange(3 * SEQ, dtype=np.uint16).reshape(3, SEQ) + i
        path = str(folder / f"part{i:04d}-train.arrow")
        with pa.ipc.new_file(path, schema) as writer:
            writer.write_batch(part_batch(ids, np.full(3, SEQ, np.int32), np.arange(3, dtype=np.uint64), schema))
        out[path] = ids
    return out


def test_a_shard_opens_each_of_its_parts_once(tmp_path, monkeypatch):
    """300 parts read a row at a time, round after round (as a shard's slices come from 1,000
    groups at a million inputs): each part is opened once and every row is the one written. With
    the 64 open parts there were, every read reopened its part."""
    count = 300  # a mapped part holds no file descriptor: any file limit allows it
    parts = _parts(tmp_path, count)
    opened = []
    real_open = pa.ipc.open_file
    monkeypatch.setattr(arrow_io.pa.ipc, "open_file", lambda source: opened.append(1) or real_open(source))
    for limit, expected_opens in ((None, count), (64, 3 * count)):
        opened.clear()
        with PartReaders(limit) as readers:
            for row in range(3):
                for path, ids in parts.items():
                    [rows] = readers.rows(path, SEQ, row, row + 1)
                    assert (rows.ids == ids[row:row + 1]).all()
        assert len(opened) == expected_opens, (limit, len(opened))
