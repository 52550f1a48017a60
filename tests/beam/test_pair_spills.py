"""The near-duplicate candidate pairs kept once by a merge of spilled chunks (`pair_spills`, issue 36
item 1): against the simple oracle (a set) on generated pairs, names that cross the merge's read
blocks, a slice cut short, and the memory of a merge of many partitions' repeats."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.beam.dedup.pair_spills import (
    PAIR_BUCKETS,
    PairFileChanged,
    PairSlice,
    pair_bucket,
    spill_pairs,
    unique_pairs,
)
from tests.beam.streamed_pairs import count_first_pairs
from tests.fuzz.runs import fuzz_runs


def _merged(tmp_path, streams: list[list[tuple]], chunk_pairs: int) -> list[tuple]:
    """Every stream spilled as one partition's pairs, the slices grouped by bucket and merged."""
    by_bucket: dict[int, list[PairSlice]] = {}
    for index, pairs in enumerate(streams):
        for bucket, piece in spill_pairs(pairs, str(tmp_path / f"pairs-{index:03d}"), chunk_pairs):
            assert 0 <= bucket < PAIR_BUCKETS
            by_bucket.setdefault(bucket, []).append(piece)
    out = []
    for bucket in sorted(by_bucket):
        got = list(unique_pairs((bucket, by_bucket[bucket])))
        assert got == sorted(set(got), key=lambda p: (p[0].encode("utf-8", "surrogatepass"),
                                                      p[1].encode("utf-8", "surrogatepass"), p[2], p[3]))
        assert {pair_bucket(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))
                for a, b, _, _ in got} == {bucket}
        out.extend(got)
    return out


# Paths as the listing gives them: any code point but NUL, lone surrogates too (os.fsdecode of bytes
# that are not UTF-8), and a few long ones (a record past the merge's 64 KB read block).
_NAMES = st.one_of(st.text(st.characters(blacklist_characters="\0", blacklist_categories=()), min_size=1,
                           max_size=12),
                   st.sampled_from(["/c/a.txt", "/c/b.txt", "/c/\udcff.txt", "/c/é.txt", "/c/" + "x" * 40_000]))
_PAIRS = st.lists(st.tuples(_NAMES, _NAMES, st.sampled_from([0, 1]), st.sampled_from([0, 1])), max_size=40)


@pytest.mark.parametrize("run", fuzz_runs(fixed=60, randomized=60))
def test_the_merged_pairs_are_each_pair_once_whatever_the_chunks(tmp_path_factory, run):
    """The pairs of several partitions, each made many times (by one partition and by several),
    spilled in chunks of 1 to 5 pairs or one chunk: the merge gives each pair once, in order,
    every pair in its bucket."""

    @given(st.lists(_PAIRS, min_size=1, max_size=4), st.sampled_from([1, 2, 5, 1 << 16]))
    def check(streams, chunk_pairs):
        tmp_path = tmp_path_factory.mktemp("pairs")
        got = _merged(tmp_path, [pairs + pairs[::2] for pairs in streams], chunk_pairs)
        assert sorted(got) == sorted({pair for pairs in streams for pair in pairs})

    run.run(check)


def test_a_slice_cut_short_is_named(tmp_path):
    pairs = [(f"/c/{i:04d}.txt", f"/c/{i + 1:04d}.txt", 0, 1) for i in range(500)]
    slices = list(spill_pairs(pairs, str(tmp_path / "pairs-000")))
    (path,) = {piece.path for _, piece in slices}
    bucket, piece = max(slices, key=lambda s: s[1].offset)
    os.truncate(path, piece.offset + piece.length - 3)
    with pytest.raises(PairFileChanged, match="pairs-000-[0-9a-f]{12}-00000.bin ends inside"):
        list(unique_pairs((bucket, [piece])))


def test_a_slice_whose_bytes_changed_is_named(tmp_path):
    """A byte of a name changed (same length: the records still parse): the slice's crc32 names the
    file, as a name that is no longer UTF-8 does."""
    pairs = [(f"/c/{i:04d}.txt", f"/c/{i + 1:04d}.txt", 0, 1) for i in range(500)]
    bucket, piece = next(iter(spill_pairs(pairs, str(tmp_path / "pairs-000"))))
    data = bytearray(open(piece.path, "rb").read())
    for byte, match in ((ord("9"), "crc32 differs"), (0xFF, "is not UTF-8")):
        changed = bytearray(data)
        changed[piece.offset + 10] = byte  # inside the first record's first name
        open(piece.path, "wb").write(bytes(changed))
        with pytest.raises(PairFileChanged, match=match):
            list(unique_pairs((bucket, [piece])))


def test_a_partition_paired_again_writes_files_of_its_own(tmp_path):
    """Its values in another order cut other chunks: each call's slices name that call's files,
    and each call's merge gives the same pairs."""
    pairs = [(f"/c/{i:04d}.txt", f"/c/{j:04d}.txt", 0, 0) for i in range(40) for j in range(i + 1, 40)]
    first = list(spill_pairs(pairs, str(tmp_path / "pairs-000"), chunk_pairs=100))
    again = list(spill_pairs(pairs[::-1], str(tmp_path / "pairs-000"), chunk_pairs=100))
    assert not {p.path for _, p in first} & {p.path for _, p in again}
    for slices in (first, again):
        merged = [pair for bucket in range(PAIR_BUCKETS)
                  for pair in unique_pairs((bucket, [p for b, p in slices if b == bucket]))]
        assert sorted(merged) == sorted(pairs)


def test_the_merge_of_many_partitions_repeats_holds_a_block_of_each(tmp_path):
    """A content's near copies share nearly all their bands: each of ~30 partitions makes the same
    pair (first, copy) of every copy. The merge gives each once holding a block of each slice (under
    2.5 MB here, where the 30 partitions' 600,000 pairs are 39 MB of records and `beam.Distinct`'s
    grouping buffer held each one)."""
    n, partitions = 20_000, 30
    pairs = [("/corpus/near-0000000.txt", f"/corpus/near-{i:07d}.txt", 0, 0) for i in range(1, n)]
    by_bucket: dict[int, list[PairSlice]] = {}
    for p in range(partitions):
        for bucket, piece in spill_pairs(pairs, str(tmp_path / f"pairs-{p:03d}"), chunk_pairs=5_000):
            by_bucket.setdefault(bucket, []).append(piece)
    spilled = sum(os.path.getsize(f) for f in tmp_path.iterdir())
    merged = (pair for bucket, pieces in sorted(by_bucket.items()) for pair in unique_pairs((bucket, pieces)))
    count, seen, peak = count_first_pairs(merged, "/corpus/near-0000000.txt", 1000)
    assert count == n - 1 and len(seen) == (n - 1) // 1000
    assert spilled > 30 << 20
    assert peak < 5 << 19, f"{peak / 2**20:.1f} MB"


def test_scored_buckets_in_small_chunks_give_the_report_and_clusters_of_the_simple_oracle(tmp_path):
    """Pairs of generated signatures (similarities spread over 0-1), spilled, scored a bucket at a
    time with a chunk of 3 lines or edges (many runs and edge files) and a twin left out: the merged
    runs are the report of each pair scored alone (every pair at or above 0.5, once, in the file's
    order), the root table the roots `cluster_roots` gives of the pairs at or above the threshold,
    with the similarity of each member to its root."""
    import json
    import random

    import numpy as np

    from pipeline.beam.dedup.near import (
        REPORT_SIMILARITY,
        TAG_EDGES,
        TAG_RUN,
        cluster_roots,
        score_bucket,
        write_root_table,
    )
    from pipeline.beam.dedup.root_table import read_roots, write_roots
    from pipeline.beam.dedup.signatures import IN_FILE, write_signature
    from pipeline.beam.writing.inputs_file import merge_runs
    from pipeline.kernels.text.quality import signature_similarity
    from schemas import manifest as m

    rng, chooser = np.random.default_rng(11), random.Random(11)
    base = rng.integers(1, 2 ** 63, 128, dtype=np.uint64)
    names = [f"/c/{chooser.choice('abc')}/doc-{i:03d}.txt" for i in range(60)]
    signatures = {}
    for name in names:  # each a share of the base signature's values: similarities all over 0-1
        keep = rng.random(128) < rng.uniform(0.3, 1.0)
        signatures[name] = np.where(keep, base, rng.integers(1, 2 ** 63, 128, dtype=np.uint64))
        write_signature(str(tmp_path), name, signatures[name])
    pairs = sorted({tuple(sorted(chooser.sample(names, 2))) for _ in range(400)})
    twin = names[7]
    twins = write_roots(str(tmp_path / "twins.bin"), [(twin, (names[0], 0.0))])
    by_bucket: dict[int, list] = {}
    for p in range(3):  # three partitions, each making every pair
        for bucket, piece in spill_pairs([(a, b, IN_FILE, IN_FILE) for a, b in pairs], str(tmp_path / f"pairs-{p}"), 50):
            by_bucket.setdefault(bucket, []).append(piece)
    runs, edge_files = [], []
    for bucket, pieces in sorted(by_bucket.items()):
        for tag, value in score_bucket((bucket, pieces), str(tmp_path), 0.75, twins=twins, chunk=3):
            (runs if tag == TAG_RUN else edge_files).append(value)
            assert tag in (TAG_RUN, TAG_EDGES)
    kept = [(a, b, round(signature_similarity(signatures[a], signatures[b]), 4)) for a, b in pairs if twin not in (a, b)]
    kept = [(a, b, s) for a, b, s in kept if s >= REPORT_SIMILARITY]
    edges = [(a, b) for a, b, s in kept if s >= 0.75]
    assert any("near-1-" in run for run in runs) and any(f.path.endswith("-00001.bin") for f in edge_files)
    assert 10 < len(edges) < len(kept) < len(pairs)
    merge_runs(runs, str(tmp_path / m.INPUTS_FILE))
    lines = [json.loads(line) for line in (tmp_path / m.INPUTS_FILE).read_text().splitlines()]
    assert [(e[m.KEY_NEAR_DUPLICATE_OF], e[m.KEY_PATH], e[m.KEY_SIMILARITY]) for e in lines] == sorted(
        kept, key=lambda p: (p[1], p[0]))
    table = read_roots(write_root_table((None, edge_files), str(tmp_path)))
    expected = {member: (root, round(signature_similarity(signatures[member], signatures[root]), 4))
                for member, root in cluster_roots(edges)}
    assert dict(table) == expected and len(expected) > 5
