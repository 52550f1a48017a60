"""Gathering rows from shard files: pread and memory-mapped readers against the table itself."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from pipeline.storage.arrow_files import fixed_list_array
from pipeline.storage.shard_rows import READ_MODES, Column, PreadShard, ShardReadError, open_shard

WIDTH = 16
COLUMNS = [Column("input_ids", WIDTH), Column("attention_mask", WIDTH), Column("mask_seed", 0)]


def _write_shard(path, batch_rows: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """An Arrow IPC stream in the shards' layout, with record batches of the given sizes."""
    rng = np.random.default_rng(seed)
    total = sum(batch_rows)
    columns = {"input_ids": rng.integers(0, 30_000, (total, WIDTH)).astype(np.int16),
               "attention_mask": rng.integers(0, 2, (total, WIDTH)).astype(np.int8),
               "mask_seed": rng.integers(0, 2**64 - 1, total, dtype=np.uint64)}
    schema = pa.schema([("input_ids", pa.list_(pa.int16(), WIDTH)), ("attention_mask", pa.list_(pa.int8(), WIDTH)),
                        ("mask_seed", pa.uint64())])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        start = 0
        for n in batch_rows:
            part = slice(start, start + n)
            writer.write_batch(pa.record_batch([fixed_list_array(columns["input_ids"][part]),
                                                fixed_list_array(columns["attention_mask"][part]),
                                                pa.array(columns["mask_seed"][part])], schema=schema))
            start += n
    return columns


@pytest.mark.parametrize("read_mode", READ_MODES)
def test_gather_returns_the_stored_rows_across_record_batches(tmp_path, read_mode):
    stored = _write_shard(tmp_path / "s.arrow", [7, 1, 30, 12])
    shard = open_shard(str(tmp_path / "s.arrow"), COLUMNS, read_mode)
    assert shard.rows == 50
    assert [d.type for d in shard.dtypes] == [np.int16, np.int8, np.uint64]
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 50, 200)  # repeats, every batch, any order
    dest = rng.permutation(200)
    outs = [np.full((200, WIDTH), -1, np.int16), np.full((200, WIDTH), -1, np.int8), np.zeros(200, np.uint64)]
    shard.gather(rows, dest, outs)
    for out, name in zip(outs, ["input_ids", "attention_mask", "mask_seed"]):
        np.testing.assert_array_equal(out[dest], stored[name][rows])
    shard.close()


def test_pread_refuses_rows_outside_the_shard_and_wrong_buffers(tmp_path):
    _write_shard(tmp_path / "s.arrow", [5])
    shard = PreadShard(str(tmp_path / "s.arrow"), COLUMNS)
    outs = [np.zeros((1, WIDTH), np.int16), np.zeros((1, WIDTH), np.int8), np.zeros(1, np.uint64)]
    with pytest.raises(IndexError, match="row 5 is outside"):
        shard.gather(np.array([5]), np.array([0]), outs)
    with pytest.raises(ValueError, match="does not take rows"):
        shard.gather(np.array([0]), np.array([0]), [np.zeros((1, WIDTH), np.int32), *outs[1:]])


def test_a_shard_truncated_while_open_is_an_error_naming_it(tmp_path):
    path = tmp_path / "s.arrow"
    _write_shard(path, [40, 40])
    shard = PreadShard(str(path), COLUMNS)
    os.truncate(path, os.path.getsize(path) // 2)
    outs = [np.zeros((1, WIDTH), np.int16), np.zeros((1, WIDTH), np.int8), np.zeros(1, np.uint64)]
    shard.gather(np.array([0]), np.array([0]), outs)  # the first rows are still there
    with pytest.raises(ShardReadError, match="s.arrow: could not read row 79"):
        shard.gather(np.array([79]), np.array([0]), outs)


def test_pread_leaves_no_mapping_and_closes_its_file(tmp_path):
    path = tmp_path / "s.arrow"
    _write_shard(path, [10, 10])
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    shard = PreadShard(str(path), COLUMNS)
    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps") as handle:
            assert str(path) not in handle.read()
    shard.close()
    shard.close()  # twice is harmless
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


def test_unknown_read_mode_is_refused(tmp_path):
    _write_shard(tmp_path / "s.arrow", [3])
    with pytest.raises(ValueError, match="read_mode must be one of pread, mmap"):
        open_shard(str(tmp_path / "s.arrow"), COLUMNS, "direct")


def _outs(n: int) -> list[np.ndarray]:
    return [np.zeros((n, WIDTH), np.int16), np.zeros((n, WIDTH), np.int8), np.zeros(n, np.uint64)]


def test_pread_refuses_destinations_outside_the_outputs_and_a_wrong_number_of_them(tmp_path):
    """A destination past the outputs would be written past the buffer (here: into the rows after
    a view), and fewer output arrays than columns would send pread to an address read past the list."""
    _write_shard(tmp_path / "s.arrow", [5])
    shard = PreadShard(str(tmp_path / "s.arrow"), COLUMNS)
    backing = _outs(8)
    views = [array[:4] for array in backing]  # C-contiguous views of 4 rows: row 4 is backing's
    with pytest.raises(IndexError, match="destination row 4 is outside the output arrays"):
        shard.gather(np.array([1]), np.array([4]), views)
    with pytest.raises(IndexError, match="destination row -1"):
        shard.gather(np.array([1]), np.array([-1]), views)
    assert not any(array[4:].any() for array in backing)
    with pytest.raises(ValueError, match="2 output arrays for the 3 columns"):
        shard.gather(np.array([0]), np.array([0]), views[:2])
    with pytest.raises(ValueError, match="one length"):
        shard.gather(np.array([0, 1]), np.array([0]), views)
    read_only = _outs(4)
    read_only[0].flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        shard.gather(np.array([0]), np.array([0]), read_only)


def test_closing_a_shard_under_a_gather_on_another_thread_never_reads_another_file(tmp_path):
    """The open-file cap closes the least recently used shard, possibly while another thread's
    gather runs in the jitted kernel without the GIL. Closing at once freed the descriptor number,
    the next open took it, and the rest of the gather read the other file's bytes."""
    import threading
    import time

    stored = _write_shard(tmp_path / "s.arrow", [5000], seed=1)
    _write_shard(tmp_path / "other.arrow", [5000], seed=2)
    shard = PreadShard(str(tmp_path / "s.arrow"), COLUMNS)
    rows = np.tile(np.arange(5000), 60)  # 300,000 rows x 3 columns: long enough to close under it
    outs, errors, others = _outs(rows.size), [], []
    started = threading.Event()

    def gather() -> None:
        started.set()
        try:
            shard.gather(rows, np.arange(rows.size), outs)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=gather)
    thread.start()
    started.wait()
    deadline = time.monotonic() + 30
    while not shard._users and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)  # until the gather is in flight
    assert thread.is_alive(), "the gather ended before the test could close the shard under it"
    shard.close()  # as the cap would
    for _ in range(4):  # files opened meanwhile take the lowest free descriptor numbers
        others.append(PreadShard(str(tmp_path / "other.arrow"), COLUMNS))
    thread.join()
    assert not errors, errors
    for out, name in zip(outs, ["input_ids", "attention_mask", "mask_seed"]):
        np.testing.assert_array_equal(out, stored[name][rows])
    with pytest.raises(ShardReadError, match="closed"):
        shard.gather(np.array([0]), np.array([0]), _outs(1))
    for other in others:
        other.close()
