"""The near-duplicate roots' table (`root_table`, issue 36 item 1): the bucket tasks' side input is
its reference, not every dropped input's (member, (root, similarity)), and each process maps it
rather than reading it. Its lookups against a dict's (the oracle) on generated entries, a changed
file named, its size a member, and what writing and reading it hold."""

from __future__ import annotations

import tracemalloc

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
        entries = sorted(roots.items(), key=lambda entry: entry[0].encode("utf-8", "surrogatepass"))
        table = RootTable(pack_roots(entries))
        assert len(table) == len(roots)
        for name in [*roots, *others]:
            assert table.get(name) == roots.get(name)
        assert dict(table) == roots and list(table) == [member for member, _ in entries]
        if len(entries) > 1:  # a table is written in its members' order
            with pytest.raises(ValueError, match="comes after"):
                pack_roots(entries[::-1])

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


def test_writing_and_reading_a_table_hold_no_entry(tmp_path):
    """200,000 near copies of one root: the table is written as its entries come and mapped, not
    read: neither holds more than a block (Python's allocations, traced), whatever the members."""
    root = "/corpus/some/folder/near-0000000.txt"
    members = (f"/corpus/some/folder/near-{i:07d}.txt" for i in range(1, 200_000))
    tracemalloc.start()
    try:
        ref = write_roots(str(tmp_path / "roots.bin"), ((member, (root, 0.9375)) for member in members))
        written = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        _READ.clear()
        table = read_roots(ref)
        assert table.get("/corpus/some/folder/near-0123456.txt") == (root, 0.9375)
        assert table.get(root) is None and len(table) == 199_999
        mapped = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = (tmp_path / "roots.bin").stat().st_size
    assert size > 199_999 * 80  # each entry's two names: a table held would show
    assert written < 4 << 20 and mapped < 1 << 20, (written, mapped)
