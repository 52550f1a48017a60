"""The near-duplicate clusters' step (`clusters.cluster_members`, issue 36 item 1) against the plain
union-find (`near.cluster_roots`, the oracle) on generated edges, and what it holds: the names go to
sorted files on local disk and the union-find works on maps of files, so its traced memory is the
same for 50,000 members as for 400,000."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.beam.dedup.clusters import cluster_members
from pipeline.beam.dedup.near import cluster_roots
from pipeline.kernels.common.union_find import smallest_roots
from tests.fuzz.runs import fuzz_runs

_NAMES = st.text(st.characters(blacklist_characters="\0", blacklist_categories=()), min_size=1, max_size=6)


def _utf8(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("run", fuzz_runs(fixed=100, randomized=100))
def test_the_clusters_are_those_of_the_plain_union_find(run, tmp_path):
    """Any names (lone surrogates, non-BMP, prefixes of each other), any edges in any order, chunks
    of 2 records to 1,000 merged 2 to 32 at a time: every member but each cluster's earliest, with its root and both places."""

    @given(st.lists(st.tuples(_NAMES, _NAMES), max_size=40), st.integers(0, 2 ** 32 - 1),
           st.sampled_from([2, 3, 5, 1000]), st.sampled_from([2, 3, 32]))
    def check(pairs, salt, chunk, fan_in):
        pairs = [(min(a, b, key=_utf8), max(a, b, key=_utf8)) for a, b in pairs if a != b]
        place = {name: (hash(name) ^ salt) & 1 for pair in pairs for name in pair}
        edges = [(a, b, place[a], place[b]) for a, b in pairs]
        got = list(cluster_members(edges, chunk=chunk, scratch_parent=str(tmp_path), fan_in=fan_in))
        expected = sorted(cluster_roots(pairs), key=lambda entry: _utf8(entry[0]))
        assert [(member, root) for member, root, _, _ in got] == expected
        assert all((place[member], place[root]) == (pm, pr) for member, root, pm, pr in got)
        assert os.listdir(tmp_path) == []  # its scratch folder goes with it

    run.run(check)


def test_the_kernel_roots_each_component_at_its_smallest_id():
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        ends = rng.integers(0, n, (int(rng.integers(0, 80)), 2)).astype(np.uint32)
        parent = np.arange(n, dtype=np.uint32)
        smallest_roots(parent, ends)
        labels = list(range(n))  # the oracle: relabel until nothing changes
        changed = True
        while changed:
            changed = False
            for a, b in ends.tolist():
                low = min(labels[a], labels[b])
                if labels[a] != low or labels[b] != low:
                    labels[a] = labels[b] = low
                    changed = True
        assert parent.tolist() == labels


def _star_and_pairs(count: int):
    """Near copies of one input, then pairs of two: clusters of one root and of many."""
    root = "/corpus/some/folder/near-0000000.txt"
    for i in range(1, count // 2):
        yield root, f"/corpus/some/folder/near-{i:07d}.txt", 0, 1
    for i in range(count // 2, count - 1, 2):
        yield f"/corpus/other/folder/pair-{i:07d}.txt", f"/corpus/other/folder/pair-{i + 1:07d}.txt", 1, 0


def _traced_peak(count: int, tmp_path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        members = sum(1 for _ in cluster_members(_star_and_pairs(count), chunk=1 << 12, scratch_parent=str(tmp_path),
                                                 fan_in=8))
        return members, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_step_holds_no_member(tmp_path):
    """50,000 and 160,000 edges, in chunks of 4,096 records merged 8 at a time (in rounds): the same
    traced peak (the old step held two dicts of every member, ~250 bytes each: +27 MB here)."""
    list(cluster_members(_star_and_pairs(10)))  # the kernel compiled (or loaded) before the count
    small_members, small = _traced_peak(50_000, tmp_path)
    large_members, large = _traced_peak(160_000, tmp_path)
    assert (small_members, large_members) == (25_000 - 1 + 12_500, 80_000 - 1 + 40_000)
    assert large < small + (1 << 20), (small, large)
    assert large < 12 << 20, large
