"""The copies of one content at the end of the job (issue 36 item 1): they share a content key, so
one bucket and one bucket task get them all, however many. A task holds about `chunk` inputs
(--task_inputs) at a time whatever its bucket holds: its memory, and that of the bucket's shard
pieces after it, do not grow with the copies."""

from __future__ import annotations

import tracemalloc

from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.input_spills import plan_tasks, write_spill
from pipeline.beam.writing.input_tasks import TAG_BUCKET, TAG_RUN, merge_bucket, run_task, twins_of
from pipeline.beam.writing.shard_plan import row_summary, spilled_pieces, spilled_rows
from schemas import manifest as m
from tests.beam.streamed_pairs import count_first_pairs

KEY = "ab" + "0" * 62  # one content: one bucket (ab0)
GROUP = 500  # inputs a spill file, as a worker's group writes them


def _copy(i: int) -> UnitResult:
    counts = dict.fromkeys(m.INPUT_COUNT_NAMES, 0)
    counts[m.FILES_READ], counts[m.ROWS] = 1, 3
    return UnitResult(source=f"/corpus/part{i % 7}/copy{i:07d}.txt", size=2048, key=KEY, counts=counts,
                      parts={m.TRAIN: (f"/tmp/parts/group{i // GROUP}-train.arrow", 3)},
                      part_starts={m.TRAIN: 3 * (i % GROUP)})


def _spilled_copies(tmp_path, copies: int):
    refs = [write_spill(str(tmp_path), [f"group {g}"], [(r.source, [r]) for r in map(_copy, range(g, min(g + GROUP,
                                                                                                        copies)))])
            for g in range(0, copies, GROUP)]
    return plan_tasks(refs, str(tmp_path), inputs_per_task=10 ** 9)  # one task: every copy


def _task_peak(tmp_path, copies: int, chunk: int) -> tuple[int, list]:
    """Peak traced bytes of running the one task of `copies` copies, and its bucket spills."""
    (task,) = _spilled_copies(tmp_path, copies)
    tracemalloc.start()
    twins = sum(1 for _ in twins_of(task, chunk))
    outputs = [(tag, value) for tag, value in run_task(task, str(tmp_path), drop=False, chunk=chunk)
               if tag in (TAG_BUCKET, TAG_RUN)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert twins == copies - 1
    return peak, outputs


def test_a_task_of_many_copies_holds_one_chunk_of_them(tmp_path):
    """8,000 copies in one task with chunks of 400: the peak is under a quarter of that of the task
    holding them all (the code before held every copy's results, records and lines at once: about
    3 KB a copy) and under 450 bytes a copy; every copy's rows reach the bucket's files."""
    copies = 8000
    held, _ = _task_peak(tmp_path / "held", copies, chunk=10 ** 9)
    chunked, outputs = _task_peak(tmp_path / "chunked", copies, chunk=400)
    assert chunked < held / 4, (chunked, held)
    assert chunked < 450 * copies, chunked
    spills = [value for tag, value in outputs if tag == TAG_BUCKET]
    runs = [value for tag, value in outputs if tag == TAG_RUN]
    assert len(spills) == copies // 400 and len(runs) >= copies * 2 // 400  # an inputs line and a duplicates line
    bucket = merge_bucket(("ab0", [(TAG_BUCKET, spill) for spill in spills]), str(tmp_path / "chunked"))
    assert bucket[1][m.TRAIN] == 3 * copies and len(bucket[2]) == len(spills)


def test_a_bucket_of_many_copies_is_cut_into_pieces_streamed(tmp_path):
    """The pieces of a bucket of 12,000 copies in 6 chunk files, cut into 60 shards: the merge holds
    a block (SPILL_BLOCK records) a file and one shard's piece at a time, written as it is cut:
    under 150 bytes a copy (the bucket held whole: over 600)."""
    copies = 12_000
    (task,) = _spilled_copies(tmp_path, copies)
    spills = [value for tag, value in run_task(task, str(tmp_path), drop=False, chunk=2000) if tag == TAG_BUCKET]
    bucket = merge_bucket(("ab0", [(TAG_BUCKET, spill) for spill in spills]), str(tmp_path))
    assert len(bucket[2]) == 6
    summary = row_summary([spilled_rows(bucket)])
    config = PreprocessConfig(inputs=("/corpus",), output=str(tmp_path / "out"), tokenizer="bert", num_shards=60)
    tracemalloc.start()
    pieces = spilled_pieces(bucket, summary, config, bytes_per_row=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sorted(shard for shard, _ in pieces) == [(m.TRAIN, i) for i in range(60)]
    assert [first for _, (first, _) in sorted(pieces)] == [i * 3 * copies // 60 for i in range(60)]
    assert peak < 150 * copies, peak


def test_the_pairing_of_many_copies_reads_their_names_not_holds_them(tmp_path):
    """20,000 copies of one text share every MinHash band: each such band pairs its first member
    with the members of other content only (`candidate_pairs` of more than MAX_BAND_GROUP), so the
    pairing reads their names a value's table at a time. Under 150 bytes a copy (the names held, as
    before: ~520); the one other content gets its one pair."""
    import numpy as np

    from pipeline.beam.dedup.band_packs import pack_bands, pairs_in_partition, write_band_file

    signature = np.random.default_rng(3).integers(0, 2 ** 32, 256, dtype=np.uint64)
    n, slices = 20_000, []
    for start in range(0, n, 500):
        packs = [p for i in range(start, start + 500)
                 for p in pack_bands(f"/corpus/some/folder/copy-{i:07d}.txt", "other" if i == 777 else "one",
                                     signature, 0) if p[0] == 1]
        slices.extend(value for p, value in write_band_file(str(tmp_path / f"b{start}.bin"), packs) if p == 1)
    tracemalloc.start()
    pairs = pairs_in_partition((1, slices))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert {(a, b) for a, b, _, _ in pairs} == {("/corpus/some/folder/copy-0000000.txt",
                                                 "/corpus/some/folder/copy-0000777.txt")}
    assert peak < 150 * n, f"{peak / n:.0f} bytes a copy"


def test_the_pairing_of_many_near_copies_streams_each_pair_once(tmp_path):
    """20,000 near copies (one text, each with a line of its own: no two of one content) share every
    MinHash band: each band pairs the first with every other, 19,999 pairs. They leave as they are
    made, and the partition's other bands of the same members give none again: under 150 bytes a
    copy while they are counted (before: one list of the partition's, a band's pairs again for each of
    its bands: 39,998 pairs here, 321 bytes a copy)."""
    import numpy as np

    from pipeline.beam.dedup.band_packs import (
        _VALUE,
        iter_pairs_in_partition,
        pack_bands,
        pairs_in_partition,
        write_band_file,
    )

    signature = np.random.default_rng(3).integers(0, 2 ** 32, 256, dtype=np.uint64)
    n, slices = 20_000, []
    for start in range(0, n, 500):
        packs = [p for i in range(start, start + 500)
                 for p in pack_bands(f"/corpus/some/folder/near-{i:07d}.txt", f"variant {i}", signature, 0)
                 if p[0] == 1]
        slices.extend(value for p, value in write_band_file(str(tmp_path / f"b{start}.bin"), packs) if p == 1)
    (value,) = [value for p, value in pack_bands("/x", "x", signature, 0) if p == 1]
    bands = _VALUE.unpack_from(value)[1]  # this partition's bands of the signature: each pairs the same
    count, later, peak = count_first_pairs(iter_pairs_in_partition((1, slices)), "/corpus/some/folder/near-0000000.txt",
                                           5000)
    assert bands >= 2 and count == n - 1 and len(later) == (n - 1) // 5000
    assert peak < 150 * n, f"{peak / n:.0f} bytes a copy"
    assert sorted(pairs_in_partition((1, slices[:4]))) == sorted(iter_pairs_in_partition((1, slices[:4])))


def test_a_plan_spill_file_cut_short_is_named(tmp_path):
    """A bucket's plan records are read back a block at a time: a file cut in a block or in a
    block's length is an error naming it, never fewer rows read as if complete."""
    import pytest

    from pipeline.beam.writing.shard_plan import SPILL_BLOCK, iter_spilled, plan_record, spill_bucket

    records = [record for i in range(SPILL_BLOCK + 10) for _, record in plan_record(_copy(i))]
    _, rows, (path,) = spill_bucket(("ab0", records), str(tmp_path))
    assert rows[m.TRAIN] == 3 * len(records) and len(list(iter_spilled((path,)))) == len(records)
    data = open(path, "rb").read()
    second_block = 8 + 4 + int.from_bytes(data[8:12], "little")  # a cut on a block's bound is found too
    for cut in (len(data) - 5, len(data) - (len(data) - 4) // 2, second_block, 2):
        with open(path, "wb") as handle:
            handle.write(data[:cut])
        with pytest.raises(ValueError, match="cut short") as error:
            list(iter_spilled((path,)))
        assert path in str(error.value)
