"""Exact duplicates among the inputs: an input whose clean content equals an earlier input's (by
path) is reported, and with --dedup dropped. The byte ranges of one split file are one input."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace

from pipeline.beam.unit_results import UnitResult
from schemas import manifest as m


def by_input(results: list[UnitResult]) -> dict[str, list[UnitResult]]:
    """Results grouped by input (a split file's ranges together, in order), inputs by path."""
    groups: dict[str, list[UnitResult]] = {}
    for result in sorted(results, key=lambda r: (r.input, r.source)):
        groups.setdefault(result.input, []).append(result)
    return groups


def input_key(parts: list[UnitResult]) -> str:
    """The content key of an input from its results: a whole file's key; for a split file, the
    hash of its ranges' keys in order ("" when a part was skipped or read nothing). Two files of
    equal content have equal sizes, so they are split alike and get equal keys."""
    if any(p.skip_reason is not None or not p.key for p in parts if not _empty_range(p)):
        return ""
    keys = [p.key for p in parts if not _empty_range(p)]
    if len(parts) == 1 or not keys:
        return keys[0] if keys else ""
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def _empty_range(result: UnitResult) -> bool:
    return bool(result.file) and result.skip_reason is None and not result.key  # a range with no record


def dropped_result(result: UnitResult, reason: str, **changes) -> UnitResult:
    """A result that contributes no rows: counts zeroed but the file count, skipped with `reason`."""
    counts = dict.fromkeys(result.counts, 0)
    counts[m.FILES_READ] = result.counts.get(m.FILES_READ, 0)
    counts[m.FILES_SKIPPED] = counts[m.FILES_READ]
    return replace(result, skip_reason=reason, parts={}, part_starts={}, counts=counts, **changes)


def mark_input(parts: list[UnitResult], twin: str | None, drop: bool) -> list[UnitResult]:
    """One input's results given the earlier input of the same content (`twin`, or None): each
    kept part names its twin, and with `drop` (--dedup) becomes a skipped result of no rows."""
    if twin is None:
        return list(parts)
    out = []
    for result in parts:
        if result.skip_reason is None:
            result = replace(result, duplicate_of=twin)
            if drop:
                result = dropped_result(result, f"duplicate of {twin} (--dedup)")
        out.append(result)
    return out


def content_record(name_and_parts: tuple[str, list[UnitResult]]) -> list[tuple[str, str]]:
    """(content key, input) of an input that has one: inputs of one key are exact duplicates."""
    name, parts = name_and_parts
    key = input_key(parts)
    return [(key, name)] if key else []


def duplicate_twins(key_and_names: tuple[str, Iterable[str]]) -> list[tuple[str, str]]:
    """(input, its twin) for every input of one content key but the first by path, its twin."""
    _, names = key_and_names
    ordered = sorted(set(names))
    return [(name, ordered[0]) for name in ordered[1:]]


def mark_duplicates(results: list[UnitResult], drop: bool) -> list[UnitResult]:
    """Report inputs whose content equals an earlier input's (by path); with `drop` (--dedup) they
    become skipped inputs contributing no rows. The byte ranges of one split file are one input:
    never duplicates of each other, and marked (or dropped) together."""
    first_by_key: dict[str, str] = {}
    out = []
    for name, parts in by_input(results).items():
        key = input_key(parts)
        twin = first_by_key.get(key) if key else None
        if key and twin is None:
            first_by_key[key] = name
        out.extend(mark_input(parts, twin, drop))
    return out
