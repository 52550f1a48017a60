"""A group of small inputs handed on as a file of the temp folder (issue 36 item 1): the units come
back whole, a changed file is named, a planted one runs no code."""

from __future__ import annotations

import pickle

import pytest

from pipeline.beam.packed import PackedValueRefused
from pipeline.beam.reading.group_files import GroupFile, read_group_file, write_group_file
from pipeline.beam.reading.work_units import UnitGroup, WorkUnit


def _group(n: int) -> UnitGroup:
    return UnitGroup(tuple(WorkUnit(source=f"/in/d\n\"{i}\udc80.txt", format="text", size=i, modified=i / 3)
                           for i in range(n)))


def test_a_group_comes_back_as_it_was_written(tmp_path):
    group = _group(7)
    ref = write_group_file(str(tmp_path), group)
    assert (ref.inputs, ref.size, ref.source) == (7, sum(range(7)), group.units[0].source)
    assert read_group_file(ref) == group
    assert write_group_file(str(tmp_path), group) == ref  # named by its inputs: a retry writes the same file


def test_a_group_file_changed_or_planted_is_refused_with_its_name(tmp_path):
    ref = write_group_file(str(tmp_path), _group(5))
    with open(ref.file, "wb") as handle:
        handle.write(pickle.dumps(_group(4).units))
    with pytest.raises(ValueError, match="holds 4 units, not the 5") as error:
        read_group_file(ref)
    assert ref.file in str(error.value)
    with open(ref.file, "wb") as handle:
        handle.write(pickle.dumps((print,)))
    with pytest.raises(PackedValueRefused):
        read_group_file(GroupFile(ref.file, 1, 0, "x"))
