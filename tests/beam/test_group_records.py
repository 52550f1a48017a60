"""--resume records of groups of small inputs: one file a group, each member found by a later run
whatever its grouping, checked as a record of its own would be (the input unchanged, its parts there)."""

from __future__ import annotations

import json
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.unit_groups import group_part_name
from pipeline.beam.unit_results import (
    ResultIndex,
    UnitResult,
    group_record_path,
    load_group_results,
    part_path,
    read_record,
    save_group_results,
)
from schemas import manifest as m

# hostile names: a newline (a record is one line), quotes, a lone surrogate (a non-UTF-8 file name)
NAMES = st.text(alphabet=st.sampled_from('ab\n"\\ é\udcff/'), min_size=1, max_size=6)


def _unit(temp_dir: str, name: str, size: int) -> WorkUnit:
    return WorkUnit(source=os.path.join(temp_dir, "in", name), format="text", size=size, modified=1.5)


def _result(temp_dir: str, group: list[WorkUnit], unit: WorkUnit, index: int) -> UnitResult:
    part = part_path(temp_dir, group_part_name(group), m.TRAIN)
    return UnitResult(source=unit.source, size=unit.size, key=f"k{index}", counts={m.ROWS: index + 1},
                      parts={m.TRAIN: (part, index + 1)}, part_starts={m.TRAIN: index}, signature=f"{index:04x}")


@settings(max_examples=40, deadline=None)
@given(names=st.lists(NAMES, min_size=1, max_size=12, unique=True), data=st.data())
def test_a_resumed_run_finds_each_finished_input_in_any_earlier_grouping_and_nothing_else(names, data):
    """Oracle: a unit's earlier result comes back exactly when its group's record was written (the
    run was killed after some groups), its identity is unchanged and its group's part is still there;
    the later run groups the units anew (another runner, other group sizes)."""
    with tempfile.TemporaryDirectory() as temp_dir:
        units = [_unit(temp_dir, name, 10 + i) for i, name in enumerate(names)]
        cuts = sorted(data.draw(st.sets(st.integers(1, len(units) - 1), max_size=4)) if len(units) > 1 else [])
        groups = [units[a:b] for a, b in zip([0, *cuts], [*cuts, len(units)])]
        written = data.draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
        parts_kept = data.draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
        expected: dict[str, UnitResult | None] = {u.source: None for u in units}
        for group, wrote, kept in zip(groups, written, parts_kept):
            results = [_result(temp_dir, group, unit, i) for i, unit in enumerate(group)]
            if kept:
                with open(results[0].parts[m.TRAIN][0], "wb") as part:
                    part.write(b"rows")
            if wrote:
                save_group_results(temp_dir, group_part_name(group), list(zip(group, results)))
                if kept:
                    expected.update((r.source, r) for r in results)
        changed = data.draw(st.sets(st.sampled_from([u.source for u in units])))
        later = [WorkUnit(source=u.source, format="text", size=u.size + (u.source in changed), modified=1.5)
                 for u in units]
        for source in changed:
            expected[source] = None
        order = data.draw(st.permutations(later))
        owner = type("Owner", (), {})()  # one run's worker: its index built once
        got: dict[str, UnitResult | None] = {}
        for start in range(0, len(order), 3):  # the later run's groups: three at a time, in another order
            got.update(load_group_results(temp_dir, order[start:start + 3], owner))
        assert {s: (r.source, r.key, r.parts, r.part_starts, r.counts) if r else None for s, r in got.items()} == \
            {s: (r.source, r.key, r.parts, r.part_starts, r.counts) if r else None for s, r in expected.items()}
        for group, wrote in zip(groups, written):  # a signature is read back from its group's record
            if wrote:
                assert read_record(temp_dir, group[-1].source)["result"]["signature"] == f"{len(group) - 1:04x}"


def test_a_record_file_is_one_header_line_and_one_line_a_member_and_a_torn_one_is_no_record(tmp_path):
    temp_dir = str(tmp_path)
    group = [_unit(temp_dir, "a\nb", 3), _unit(temp_dir, "c", 4)]
    results = [_result(temp_dir, group, u, i) for i, u in enumerate(group)]
    with open(results[0].parts[m.TRAIN][0], "wb") as part:
        part.write(b"rows")
    save_group_results(temp_dir, group_part_name(group), list(zip(group, results)))
    assert [r.key for r in load_group_results(temp_dir, group).values()] == ["k0", "k1"]
    path = group_record_path(temp_dir, group_part_name(group))
    lines = open(path, encoding="utf-8").read().splitlines()
    header = json.loads(lines[0])
    assert len(lines) == 3 and header["sources"] == [u.source for u in group] and header["rows"] == [1, 2]
    assert [json.loads(line)["result"]["source"] for line in lines[1:]] == header["sources"]
    assert len(ResultIndex(temp_dir)) == 2
    # a file cut short (a copy interrupted; a local write is renamed into place whole) finds no member
    # whose line is gone, and a file whose header is not one is not indexed
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(lines[0] + "\n" + lines[1][:20])
    with open(tmp_path / f"x{os.path.basename(path)}", "w", encoding="utf-8") as handle:
        handle.write("[1, 2]\n")
    assert load_group_results(temp_dir, group) == {u.source: None for u in group}


def test_an_input_redone_in_another_grouping_is_read_from_its_newer_record(tmp_path):
    """Killed, the input changed, resumed in another grouping: the input is in two record files, and
    its signature (near-duplicate detection) and its reuse come from the newer, never the stale one."""
    temp_dir = str(tmp_path)
    old = _unit(temp_dir, "x", 3)
    new = WorkUnit(source=old.source, format="text", size=4, modified=2.5)  # grew since
    other = _unit(temp_dir, "y", 5)
    paths = []
    for at, group in ((100, [old]), (200, [other, new])):
        results = [_result(temp_dir, group, u, i) for i, u in enumerate(group)]
        with open(results[0].parts[m.TRAIN][0], "wb") as part:
            part.write(b"rows")
        save_group_results(temp_dir, group_part_name(group), list(zip(group, results)))
        paths.append(group_record_path(temp_dir, group_part_name(group)))
        os.utime(paths[-1], (at, at))
    assert read_record(temp_dir, old.source)["identity"] == new.identity
    assert read_record(temp_dir, old.source)["result"]["signature"] == "0001"
    assert load_group_results(temp_dir, [new])[new.source].key == "k1"
    os.utime(paths[0], (300, 300))  # the other way round: the one-member file is the newer
    assert load_group_results(temp_dir, [old])[old.source].key == "k0"


def test_signature_lookups_one_input_at_a_time_read_a_group_file_once_while_it_is_asked(tmp_path, monkeypatch):
    """The near-duplicate pairs' signatures are read one input at a time: 50,000 near copies of one
    text read the first input's group file 100,000 times (~14 ms a pair, 13 minutes of a 50,000-file
    run). Pairs of the first input with each input of three groups in turn read each file once; a
    file out of the recent ones is read again, and every lookup still gives its own record."""
    from pipeline.beam import unit_results

    temp_dir = str(tmp_path)
    groups = [[_unit(temp_dir, f"g{g}-{i:03d}", 10 + i) for i in range(40)] for g in range(3 + unit_results.RECENT_GROUP_FILES)]
    for group in groups:
        results = [_result(temp_dir, group, unit, i) for i, unit in enumerate(group)]
        save_group_results(temp_dir, group_part_name(group), list(zip(group, results)))
    reads: list[str] = []
    real_read_text = unit_results.read_text
    monkeypatch.setattr(unit_results, "read_text", lambda path: reads.append(path) or real_read_text(path))
    first = groups[0][0].source
    for group in groups[:3]:
        for i, unit in enumerate(group):
            assert read_record(temp_dir, first)["result"]["signature"] == "0000"
            assert read_record(temp_dir, unit.source)["result"]["signature"] == f"{i:04x}"
    assert len(reads) == 3 and len(set(reads)) == 3, reads
    for group in groups[3:]:  # more files than are kept: the first group's file leaves, then is read again
        assert read_record(temp_dir, group[5].source)["result"]["signature"] == "0005"
    assert read_record(temp_dir, first)["result"]["signature"] == "0000"
    assert len(reads) == 3 + len(groups[3:]) + 1 and reads[-1] == reads[0]
