"""A group of small inputs (`UnitGroup`) in one worker call: each input read, gated and tokenized
as `units.process_unit` does one, its rows after the previous kept input's in one train and one
validation part (one pair of files for the group instead of one per input, read once per shard);
each input keeps its own result (its rows: where they start in the group's parts) and its own
--resume record, in the group's one record file (`unit_results.save_group_results`), written once
the parts are in place."""

from __future__ import annotations

from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import UnitGroup, WorkUnit
from pipeline.beam.unit_results import UnitResult, load_group_results, save_group_results
from pipeline.beam.units import StageClock, UnitContext, check_unchanged, scan_unit, tokenize_unit
from pipeline.beam.writing.part_writer import MemberWriter, PartWriter
from pipeline.tokenizer.errors import is_panic


class InputFailed(Exception):
    """An unexpected error on one input of a group (bad input is skipped, not this): the input's
    source and what it raised, for the message that names it."""

    def __init__(self, source: str, error: BaseException) -> None:
        super().__init__(f"{source}: {type(error).__name__}: {error}")
        self.source = source
        self.error = error


def group_part_name(units: list[WorkUnit]) -> str:
    """What a group's parts are named from: the inputs it writes (a NUL, never in a path, keeps the
    name apart from any one input's). A resumed group writes only the inputs without a result, so
    its parts never replace those the others' results point to."""
    return "\0".join(["group", *(unit.source for unit in units)])


def process_group(group: UnitGroup, context: UnitContext, clock: StageClock | None = None) -> list[UnitResult]:
    """Every input's result, in the group's order. An input finished by an interrupted run of the
    same config (its record in the temp folder, the input unchanged, its parts there) is reused.

    Raises:
        InputFailed: naming the input whose processing raised.
    """
    clock = clock or StageClock()
    results = load_group_results(context.temp_dir, group.units, context)
    todo = [unit for unit in group.units if results[unit.source] is None]
    if todo:
        writer = PartWriter(context.temp_dir, group_part_name(todo), context.layout, context.id_dtype, context.config)
        try:
            made = [(unit, _process_member(unit, context, clock, writer)) for unit in todo]
            writer.close()
        except BaseException:
            writer.abort()
            raise
        for unit, result in made:
            results[unit.source] = result
        # after the parts are in place: the record marks the group's inputs done (the reused ones too,
        # so that a later resume of the same grouping reads one file)
        save_group_results(context.temp_dir, group_part_name(group.units),
                           [(unit, results[unit.source]) for unit in group.units])
    return [results[unit.source] for unit in group.units]


def _process_member(unit: WorkUnit, context: UnitContext, clock: StageClock, writer: PartWriter) -> UnitResult:
    try:
        reader = UnitReader(unit, context.config.text_column, context.config.keep_boilerplate)
        result, scan = scan_unit(reader, context.config, clock)
        if result.skip_reason is not None or scan.skip_reason is not None:
            return result
        member = MemberWriter(writer, context.config)
        result = check_unchanged(unit, tokenize_unit(reader, result, context, clock, member), discard=member.abort)
        member.commit()  # nothing when a gate or a change dropped its rows
        return result
    except Exception as error:
        raise InputFailed(unit.source, error) from error
    except BaseException as error:
        if not is_panic(error):  # an interrupt, an exit
            raise
        raise InputFailed(unit.source, error) from None
