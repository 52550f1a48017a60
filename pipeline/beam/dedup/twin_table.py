"""With --dedup, the exact duplicates' table (input -> its twin, the first input of its content by
path) that the near-duplicate scoring looks the candidate pairs' members up in: a pair with a
duplicate --dedup drops is not scored (`near.score_bucket`).

The twins were a side input of the scoring, found by each bucket task among the pairs' members,
which came as one element each (a `beam.Distinct` of every member of every pair, and a side input of
every task): +24 MB at 50,000 near copies on the local runner. Now each task writes its twins to
files of the temp folder, sorted in chunks of at most SPILL_PAIRS (`spill_twins`), one step merges
them into one table (`root_table`'s form, the similarity 0: `write_twin_table`), and the scoring
gets its reference: each process maps it. Only references go through the runner.
"""

from __future__ import annotations

import heapq
import posixpath
import tempfile
import uuid
from collections.abc import Iterable, Iterator

from pipeline.beam.dedup.pair_spills import SPILL_PAIRS, PairSlice, encode_name, merged_rounds, read_keys, write_keys
from pipeline.beam.dedup.root_table import RootsRef, write_roots
from pipeline.beam.writing.input_spills import BucketTask
from pipeline.beam.writing.input_tasks import TASK_CHUNK, twins_of

__all__ = ["TWINS_FILE", "spill_twins", "write_twin_table"]

TWINS_FILE = "exact-twins.bin"  # in the temp folder: the twins' table



def spill_twins(task: BucketTask, temp_dir: str, chunk: int = TASK_CHUNK, spill: int = SPILL_PAIRS,
                paired: Iterable[int] | None = None) -> Iterator[PairSlice]:
    """The (input, twin) of the task's exact duplicates (`input_tasks.twins_of`) written to the temp
    folder in sorted files of at most `spill` each (named by this call: a task run again writes its
    own); the slice of each. None when `paired` (the buckets of candidate pairs) is empty: no pair
    to leave unscored, and the task's spill files are not read again."""
    if paired is not None and not any(True for _ in paired):
        return
    stem = posixpath.join(temp_dir, f"twins-{task.index:05d}-{uuid.uuid4().hex[:12]}")
    held: list[tuple[bytes, bytes, int, int]] = []
    files = 0
    for name, twin in twins_of(task, chunk=chunk):
        held.append((encode_name(name), encode_name(twin), 0, 0))
        if len(held) >= spill:
            yield write_keys(f"{stem}-{files:05d}.bin", sorted(held))
            held, files = [], files + 1
    if held:
        yield write_keys(f"{stem}-{files:05d}.bin", sorted(held))


def write_twin_table(key_and_slices: tuple[None, Iterable[PairSlice]], temp_dir: str) -> RootsRef:
    """The twins of every task's files (`spill_twins`) merged into one table (each input once: its
    content's inputs are all in one task, and a task run again gives the same twins) written to
    `temp_dir`; its reference."""
    pieces = sorted(set(key_and_slices[1]), key=lambda piece: piece.path)
    with tempfile.TemporaryDirectory(prefix="maskbeam-twins-") as scratch:
        merged = merged_rounds(pieces, scratch)
        return write_roots(posixpath.join(temp_dir, TWINS_FILE), _entries(heapq.merge(*map(read_keys, merged))))


def _entries(keys: Iterable[tuple[bytes, bytes, int, int]]) -> Iterator[tuple[str, tuple[str, float]]]:
    """The table's entries of the merged files' keys, each once: a task run again (Beam's Dask
    runner computes a side input's steps anew) writes files of its own with the same twins."""
    previous = None
    for key in keys:
        if key != previous:
            previous = key
            yield key[0].decode("utf-8", "surrogatepass"), (key[1].decode("utf-8", "surrogatepass"), 0.0)
