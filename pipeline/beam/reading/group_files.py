"""A group of small inputs as the lister hands it on: the group's work units in a file of the temp
folder, and only a reference (`GroupFile`) through the runner.

Beam's local runner holds every element between two stages in memory: the listing of a million
files, one WorkUnit an input (~260 bytes encoded, ~600 decoded), was held in the shuffle that spreads
the units over the workers, again in the bins it cut, and decoded whole where the bins were cut.
The lister now groups the small files as it lists them (`work_units.group_units`) and writes each
group's units to a file (`write_group_file`); the worker that reads the group loads them back
(`read_group_file`), with the job's unpickler (`pipeline.beam.packed`: a planted file runs no code).
"""

from __future__ import annotations

from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.packed import allow, pack, unpack
from pipeline.beam.reading.work_units import UnitGroup, WorkUnit
from pipeline.beam.unit_results import unit_file_stem
from pipeline.beam.writing.arrow_io import write_bytes

__all__ = ["GroupFile", "write_group_file", "read_group_file", "GROUP_FILE_SUFFIX"]

GROUP_FILE_SUFFIX = "-units.group"


@dataclass(frozen=True)
class GroupFile:
    """Where a UnitGroup's units lie (`file`), how many (`inputs`), their bytes (`size`) and the
    first input's path (`source`: what spreading over workers balances and breaks ties by)."""

    file: str
    inputs: int
    size: int
    source: str


def write_group_file(temp_dir: str, group: UnitGroup) -> GroupFile:
    """The group's units to a file named by their paths (a retry writes the same file)."""
    path = unit_file_stem(temp_dir, "\0".join(["units", *(unit.source for unit in group.units)])) + GROUP_FILE_SUFFIX
    write_bytes(path, pack(group.units))
    return GroupFile(path, len(group.units), group.size, group.source)


def read_group_file(ref: GroupFile) -> UnitGroup:
    with FileSystems.open(ref.file, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        units = unpack(handle.read())
    if len(units) != ref.inputs or not all(isinstance(unit, WorkUnit) for unit in units):
        raise ValueError(f"group file {ref.file} holds {len(units)} units, not the {ref.inputs} listed: the run's "
                         f"temp folder was changed while the job ran")
    return UnitGroup(tuple(units))


# What group files hold (`pipeline.beam.packed`).
allow(WorkUnit)
