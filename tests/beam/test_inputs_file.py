"""INPUTS_FILE: the per-input records beside the manifest, written by workers in sorted runs and merged
by the finalize step (pipeline.beam.writing.inputs_file), so the manifest's size does not grow with
the number of inputs and no element holds every input's record."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.transforms import tokenizer_record
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.finalize import add_totals, finalize_output, reason_kind, unit_totals
from pipeline.beam.writing.inputs_file import (
    boilerplate_share,
    merge_runs,
    read_entries,
    sortable_line,
    unit_entries,
    write_run,
)
from pipeline.beam.writing.sharding import ShardResult
from pipeline.consumers.outputs import manifest_with_inputs
from schemas import manifest as m

SHA = "cd" * 32


def _units(n: int) -> list[UnitResult]:
    """n results: most read, every 7th skipped, every 5th a duplicate of the first, one split file's ranges."""
    units = []
    for i in range(n):
        counts = {m.ROWS: i % 3, m.TOKENS: 100 + i, m.UNK_TOKENS: i % 2, m.DOCUMENTS: 1, m.CHARACTERS: 400 + i,
                  m.BOILERPLATE_CHARS_REMOVED: i % 4, m.FILES_READ: 1}
        skipped = "not text: an HTML/XML page" if i % 7 == 3 else (f"unreadable: EOFError: at byte {i}" if i % 7 == 1
                                                                   else None)
        units.append(UnitResult(
            source=f"/data/books/{n - i:06d}.txt", size=250 + i, key=f"{i:064x}", skip_reason=skipped,
            counts={m.FILES_SKIPPED: 1} if skipped else counts, unk_fraction=None if skipped else 0.01 * (i % 5),
            scripts={"Latin": 1.0} if i % 2 else {"Latin": 0.75, "Greek": 0.25},
            duplicate_of="/data/books/000001.txt" if i % 5 == 4 and not skipped else None,
            records_skipped={"not a string": 1} if i % 11 == 0 else {}))
    units.append(UnitResult(source="/data/big.jsonl#lines=0-99", size=4096, key=SHA, counts={m.ROWS: 2, m.TOKENS: 90},
                            file="/data/big.jsonl"))
    return units


def _near(n: int) -> list[dict]:
    return [{m.KEY_PATH: f"/data/books/{i:06d}.txt", m.KEY_NEAR_DUPLICATE_OF: "/data/books/000001.txt",
             m.KEY_SIMILARITY: 0.5 + 0.01 * (i % 40)} for i in range(n, 1, -3)]


def _version_1_lists(units: list[UnitResult], near: list[dict]) -> dict[str, list[dict]]:
    """What a version-1 manifest listed (finalize.build_manifest before INPUTS_FILE), as the reference."""
    def quality(u):
        return {m.KEY_UNK_FRACTION: u.unk_fraction, m.KEY_SCRIPTS: u.scripts, m.KEY_DOMINANT_SCRIPT: u.dominant_script}
    by_source = sorted(units, key=lambda u: u.source)
    return {
        m.KEY_INPUTS: [
            {m.KEY_PATH: u.source, m.KEY_SIZE: u.size, "content_sha256": u.key, m.KEY_ROWS: u.counts.get(m.ROWS, 0),
             m.TOKENS: u.counts.get(m.TOKENS, 0), m.UNK_TOKENS: u.counts.get(m.UNK_TOKENS, 0),
             m.RECORDS_SKIPPED: u.records_skipped,
             m.BOILERPLATE_CHARS_REMOVED: u.counts.get(m.BOILERPLATE_CHARS_REMOVED, 0),
             m.KEY_BOILERPLATE_SHARE: boilerplate_share(u.counts), **quality(u)}
            for u in by_source if u.skip_reason is None],
        m.KEY_SKIPPED: [{m.KEY_PATH: u.source, m.KEY_SIZE: u.size, m.KEY_REASON: u.skip_reason, **quality(u)}
                        for u in by_source if u.skip_reason is not None],
        m.KEY_DUPLICATES: [{m.KEY_PATH: u.source, m.KEY_DUPLICATE_OF: u.duplicate_of}
                           for u in by_source if u.duplicate_of],
        m.KEY_NEAR_DUPLICATES: sorted(near, key=lambda e: (e[m.KEY_PATH], e[m.KEY_NEAR_DUPLICATE_OF])),
    }


def _lines(units: list[UnitResult], near: list[dict]) -> list[tuple[tuple, str]]:
    lines = [sortable_line(section, entry) for u in units for section, entry in unit_entries(u)]
    return lines + [sortable_line(m.KEY_NEAR_DUPLICATES, entry) for entry in near]


def _write_runs(temp_dir: str, lines: list, runs: int) -> list[str]:
    """The lines in `runs` runs of a shuffled order."""
    order = np.random.default_rng(runs).permutation(len(lines))
    return [write_run(temp_dir, bucket, [lines[i] for i in chunk])
            for bucket, chunk in enumerate(np.array_split(order, runs))]


def _sections(path) -> dict[str, list[dict]]:
    sections = {section: [] for section in m.INPUT_SECTIONS}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        sections[entry.pop(m.KEY_SECTION)].append(entry)
    return sections


@pytest.mark.parametrize("runs", [1, 4])
def test_the_merged_file_lists_what_the_version_1_manifest_listed(tmp_path, runs):
    units, near = _units(60), _near(60)
    lines = _lines(units, near)
    record = merge_runs(_write_runs(str(tmp_path), lines, runs), str(tmp_path / m.INPUTS_FILE))
    assert _sections(tmp_path / m.INPUTS_FILE) == _version_1_lists(units, near)
    data = (tmp_path / m.INPUTS_FILE).read_bytes()
    assert record[m.KEY_BYTES] == len(data) and record[m.KEY_LINES] == {
        section: len(entries) for section, entries in _version_1_lists(units, near).items()}
    assert sorted(p.name for p in tmp_path.iterdir()) == [m.INPUTS_FILE]  # the runs are gone
    # the same bytes whatever the runs were
    other = tmp_path / "other"
    other.mkdir()
    assert merge_runs(_write_runs(str(other), lines, 7), str(other / m.INPUTS_FILE)) == record
    assert (other / m.INPUTS_FILE).read_bytes() == data


def _finalize(tmp_path, n: int, spec) -> tuple[dict, str]:
    out = tmp_path / f"out{n}"
    temp = out / m.TEMP_DIR
    temp.mkdir(parents=True)
    config = PreprocessConfig(inputs=("/data",), output=str(out), tokenizer="bert", max_seq_length=64)
    units = _units(n)
    runs = _write_runs(str(temp), _lines(units, _near(n)), 3)
    shards = [ShardResult(split, 0, m.shard_name(0, 1), 10, 10 * 64 * 3, SHA,
                          dict.fromkeys(m.MASK_COUNT_NAMES, 1), SHA) for split in m.SPLITS]
    info = tokenizer_record(spec, "bert")
    finalize_output(add_totals(unit_totals(u) for u in units), runs, shards, config, info, np.dtype(np.int16),
                    spec.json)
    return json.loads((out / m.MANIFEST_FILE).read_text()), str(out)


def test_the_manifest_does_not_grow_with_the_inputs(tmp_path, spec):
    """5 and 200 inputs: manifests of one size but for the digits of their counts, the paths in
    their config and the file's sha256; every input in INPUTS_FILE."""
    small, small_out = _finalize(tmp_path, 5, spec)
    large, large_out = _finalize(tmp_path, 200, spec)

    def shape(manifest: dict) -> str:
        manifest[m.KEY_CONFIG]["output"] = ""
        return re.sub(r"[0-9a-f]{64}|\d+", "#", m.dumps(manifest))

    assert len(shape(small)) == len(shape(large)) and shape(small) == shape(large)
    assert len(m.dumps(large)) < len(m.dumps(small)) + 200  # digits only
    for manifest, out, n in ((small, small_out, 5), (large, large_out, 200)):
        m.validate_manifest(manifest)
        lists = _version_1_lists(_units(n), _near(n))
        assert {k: v for k, v in manifest_with_inputs(out).items() if k in m.INPUT_SECTIONS} == lists
        assert [section for section, _ in read_entries(out, manifest)].count(m.KEY_INPUTS) == len(lists[m.KEY_INPUTS])
        kinds = manifest[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON]
        assert kinds == {kind: [reason_kind(e[m.KEY_REASON]) for e in lists[m.KEY_SKIPPED]].count(kind)
                         for kind in kinds} and sum(kinds.values()) == len(lists[m.KEY_SKIPPED])
