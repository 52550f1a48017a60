"""The near-duplicate roots' packed table (`root_table`, issue 36 item 1): the bucket tasks' side
input is its reference, not every dropped input's (member, (root, similarity)). Its lookups against
a dict's (the oracle) on generated entries, a changed file named, and its size a member."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.beam.dedup.root_table import _READ, RootTable, RootTableChanged, pack_roots, read_roots, write_roots
from tests.fuzz.runs import fuzz_runs

_NAMES = st.text(st.characters(blacklist_characters="\0", blacklist_categories=()), min_size=1, max_size=10)


@pytest.mark.parametrize("run", fuzz_runs(fixed=80, randomized=80))
def test_the_table_answers_as_a_dict(run):
    """Any names (lone surrogates, non-BMP, prefixes of each other), any similarities: every member
    gives its (root, similarity) exactly, any other name None."""

    @given(st.dictionaries(_NAMES, st.tuples(_NAMES, st.floats(0, 1, allow_nan=False)), max_size=30),
           st.lists(_NAMES, max_size=10))
    def check(roots, others):
        packed = pack_roots(roots.items())
        assert pack_roots(sorted(roots.items())) == packed  # in order: packed as they come, the same bytes
        table = RootTable(packed)
        assert len(table) == len(roots)
        for name in [*roots, *others]:
            assert table.get(name) == roots.get(name)
        assert dict(table) == roots

    run.run(check)


def test_a_changed_table_is_named(tmp_path):
    ref = write_roots(str(tmp_path / "roots.bin"), [("/c/b.txt", ("/c/a.txt", 0.9)), ("/c/c.txt", ("/c/a.txt", 0.85))])
    assert read_roots(ref).get("/c/c.txt") == ("/c/a.txt", 0.85)
    assert read_roots(None) is None
    data = (tmp_path / "roots.bin").read_bytes()
    (tmp_path / "roots.bin").write_bytes(data[:-1] + b"x")
    _READ.clear()  # another process: it reads the file
    with pytest.raises(RootTableChanged, match="roots.bin is not the roots' table the job wrote"):
        read_roots(ref)
    with pytest.raises(RootTableChanged, match="not the .* its header says"):
        RootTable(data[:-1])
    with pytest.raises(ValueError, match="has two roots"):
        pack_roots([("/c/b.txt", ("/c/a.txt", 0.9)), ("/c/b.txt", ("/c/x.txt", 0.9))])


def test_a_member_costs_its_name_and_20_bytes():
    """50,000 near copies of one root: the table is the members' names and 20 bytes each."""
    members = [f"/corpus/some/folder/near-{i:07d}.txt" for i in range(1, 50_000)]
    blob = pack_roots((member, ("/corpus/some/folder/near-0000000.txt", 0.9375)) for member in members)
    names = sum(len(member) for member in members)
    assert len(blob) - names < 20 * len(members) + 200
    table = RootTable(blob)
    assert table.get(members[777]) == ("/corpus/some/folder/near-0000000.txt", 0.9375)
    assert table.get("/corpus/some/folder/near-0000000.txt") is None
