"""Many small inputs in one work unit (issue 36 item 1): a group of small files is read by one
worker call into one train and one validation part, and the output is byte-identical to the run
where every input is its own unit (skipped inputs, --dedup, --near_dedup and --resume included)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from benchmarks.many_files import _words, file_text
from pipeline.beam.reading.work_units import UnitGroup, WorkUnit, expand_inputs, group_units
from pipeline.consumers.outputs import manifest_with_inputs
from schemas import manifest as m
from tests.conftest import run_preprocess

ARGS = ["--max_seq_length", "64", "--min_tokens", "8", "--validation_fraction", "0.2", "--num_shards", "3",
        "--dedup", "--near_dedup", "0.8"]
FILES = 30


def _write_inputs(folder: Path) -> Path:
    """30 small inputs: distinct texts, an exact and a near duplicate, and inputs skipped for each
    of several reasons (empty, binary, the [UNK] gate after its rows were made, too short for a row)."""
    folder.mkdir()
    words = _words()
    for i in range(FILES - 6):
        (folder / f"doc{i:02d}.txt").write_text(file_text(i, words)[: 300 + 60 * i])
    (folder / "doc05copy.txt").write_text((folder / "doc05.txt").read_text())
    near = (folder / "doc20.txt").read_text().split(" ")
    (folder / "doc20near.txt").write_text(" ".join(near[:-3] + ["different", "closing", "words.\n"]))
    (folder / "empty.txt").write_text("")
    (folder / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (folder / "unk.txt").write_text("\U0001f600 " * 200 + "a few words.\n")
    (folder / "short.txt").write_text("Hi.\n")
    return folder


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    return _write_inputs(tmp_path_factory.mktemp("groups") / "in")


@pytest.fixture(scope="module")
def alone(inputs) -> Path:
    """The run where every input is its own unit."""
    out = inputs.parent / "alone"
    run_preprocess([inputs], out, *ARGS, "--group_inputs", "1")
    return out


def _hashes(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != m.MANIFEST_FILE}


def _same_output(expected: Path, got: Path) -> None:
    assert _hashes(got) == _hashes(expected)
    a, b = (json.loads((out / m.MANIFEST_FILE).read_text()) for out in (expected, got))
    a[m.KEY_CONFIG]["output"] = b[m.KEY_CONFIG]["output"]
    assert a == b


@pytest.mark.slow
def test_the_inputs_cover_every_case(alone):
    manifest = manifest_with_inputs(str(alone))
    reasons = " | ".join(e[m.KEY_REASON] for e in manifest[m.KEY_SKIPPED])
    for kind in ("empty", "not text", "[UNK] gate", "duplicate of", "near duplicate of"):
        assert kind in reasons, reasons
    assert manifest[m.KEY_COUNTS][m.DOCUMENTS_TOO_SHORT] >= 1
    assert all(manifest[m.KEY_SPLITS][split][m.KEY_ROWS] for split in m.SPLITS)


@pytest.mark.slow
def test_grouped_and_resumed_inside_a_group_makes_the_same_output(inputs, alone, tmp_path, caplog):
    """Grouped against every input alone: a run whose first group (5 inputs) finished and whose
    second failed half-way (its inputs done so far have no record: a group's records are written
    once its parts are), resumed with groups of 3: the finished group's inputs are reused from
    their shared parts, the other 25 grouped anew; the same shards, side files and manifest."""
    from pipeline.beam.run.config import PreprocessConfig
    from pipeline.beam.run.job import prepare_run
    from pipeline.beam.unit_groups import InputFailed, process_group
    from pipeline.beam.units import UnitContext
    from pipeline.tokenizer.fast import FastTokenizer
    from pipeline.tokenizer.spec import build_tokenizer
    from tests.conftest import TOKENIZER_DIR

    out = tmp_path / "resumed"
    config = PreprocessConfig(inputs=(str(inputs),), output=str(out), tokenizer=str(TOKENIZER_DIR),
                              max_seq_length=64, min_tokens=8, validation_fraction=0.2, num_shards=3, dedup=True,
                              near_dedup=0.8)
    run = prepare_run(config, "fast", resume=False, overwrite=False)
    temp_dir = str(out / m.TEMP_DIR)
    context = UnitContext.from_spec(run.spec, run.config, temp_dir).with_tokenizer(
        FastTokenizer(build_tokenizer(run.spec), run.spec.json))
    groups = [g for g in group_units(run.units, 5, 1 << 20) if isinstance(g, UnitGroup)]
    first, second = groups[0], groups[1]
    assert len(process_group(first, context)) == 5
    broken = WorkUnit(source=str(inputs / "gone.txt"), format="no such format")
    with pytest.raises(InputFailed, match="gone.txt"):
        process_group(UnitGroup(second.units[:3] + (broken,) + second.units[3:]), context)
    assert len(list((out / m.TEMP_DIR).glob("*-train.arrow"))) == 1  # the first group's; the second's went
    with caplog.at_level("INFO", logger="maskbeam"):
        run_preprocess([inputs], out, *ARGS, "--group_inputs", "3", "--resume")
    said = re.search(r"--resume: (\d+) of (\d+) inputs reused", caplog.text)
    assert said and (int(said[1]), int(said[2])) == (5, FILES), caplog.text
    _same_output(alone, out)


@pytest.mark.slow
def test_the_end_of_the_job_in_many_bucket_tasks_makes_the_same_output(inputs, alone, tmp_path):
    """The inputs' results read back in bucket tasks of about 2 inputs each (15 tasks; the default
    is one task here) against one task: exact duplicates meet in one task whatever the cut, the
    near duplicate is dropped by its own task, the shards, side files and manifest are the same."""
    out = tmp_path / "tasks"
    run_preprocess([inputs], out, *ARGS, "--group_inputs", "7", "--task_inputs", "2")
    _same_output(alone, out)


@pytest.mark.slow
@pytest.mark.parametrize("dedup", [False, True])
def test_many_copies_of_one_content_in_one_task_are_held_in_chunks(tmp_path, dedup):
    """The copies of one content share one bucket, so one task reads them all (the hostile case for
    the end of the job's memory). With --task_inputs 3 the task holds 3 inputs at a time: it reads
    its spill files twice (the first of each content by path first), spills its bucket's records in
    chunks (merged as the shards' pieces are cut) and writes a run of lines each 3; the output is
    byte for byte the one task that holds all 40 copies gives. Without --dedup the copies keep their
    rows (one bucket's rows in many chunks), with it they are dropped."""
    folder = tmp_path / "in"
    folder.mkdir()
    words = _words()
    text = file_text(7, words)[:900]
    for i in range(40):
        (folder / f"copy{(i * 17) % 40:02d}.txt").write_text(text)
    for i in range(8):
        (folder / f"doc{i:02d}.txt").write_text(file_text(300 + i, words)[: 400 + 50 * i])
    args = ["--max_seq_length", "64", "--min_tokens", "8", "--validation_fraction", "0.2", "--num_shards", "3",
            "--group_inputs", "6", *(["--dedup"] if dedup else [])]
    run_preprocess([folder], tmp_path / "whole", *args)
    run_preprocess([folder], tmp_path / "chunks", *args, "--task_inputs", "3")
    _same_output(tmp_path / "whole", tmp_path / "chunks")
    manifest = manifest_with_inputs(str(tmp_path / "chunks"))
    twins = {e[m.KEY_PATH]: e[m.KEY_DUPLICATE_OF] for e in manifest[m.KEY_DUPLICATES]}
    assert len(twins) == 39 and set(twins.values()) == {str(folder / "copy00.txt")}
    rows = {Path(e[m.KEY_PATH]).name: e[m.KEY_ROWS] for e in manifest[m.KEY_INPUTS]}
    assert (rows.get("copy39.txt", 0) > 0) != dedup  # kept with its rows, or dropped by --dedup


@pytest.mark.slow
def test_byte_ranges_and_input_splits_make_the_same_output_in_many_bucket_tasks(tmp_path):
    """Two .jsonl files of equal content read in byte ranges (exact duplicates of each other: one
    task must meet both), a text read in input splits, small files and a copy, in one task against
    tasks of one input each: a byte range's rows go to its own key's plan bucket, which another task
    may own, and are merged there (`input_tasks.merge_bucket`)."""
    folder = tmp_path / "in"
    folder.mkdir()
    words = _words()
    for i in range(12):
        (folder / f"doc{i:02d}.txt").write_text(file_text(i, words)[: 400 + 40 * i])
    (folder / "doc03copy.txt").write_text((folder / "doc03.txt").read_text())
    (folder / "big.jsonl").write_text("".join(json.dumps({"text": file_text(100 + i, words)[:300]}) + "\n"
                                              for i in range(40)))
    (folder / "big2.jsonl").write_text((folder / "big.jsonl").read_text())
    (folder / "book.txt").write_text("\n\n".join(file_text(200 + i, words)[:500] for i in range(20)))
    args = [*ARGS, "--split_bytes", "2048", "--group_inputs", "5"]
    run_preprocess([folder], tmp_path / "one", *args)
    run_preprocess([folder], tmp_path / "many", *args, "--task_inputs", "1")
    _same_output(tmp_path / "one", tmp_path / "many")
    manifest = manifest_with_inputs(str(tmp_path / "many"))
    reasons = " | ".join(e[m.KEY_REASON] for e in manifest[m.KEY_SKIPPED])
    assert "big.jsonl (--dedup)" in reasons and "doc03.txt (--dedup)" in reasons, reasons


def test_groups_are_consecutive_small_files_within_their_bounds():
    units = [WorkUnit(source=f"/in/{i:02d}.txt", format="text", size=100) for i in range(10)]
    big = WorkUnit(source="/in/big.txt", format="text", size=2 << 20)
    grouped = group_units([*reversed(units), big], 4, 1000)
    assert grouped[0] == big
    assert [len(g.units) if isinstance(g, UnitGroup) else 1 for g in grouped[1:]] == [4, 4, 2]
    assert [u for g in grouped[1:] for u in g.units] == units
    by_bytes = group_units(units, 100, 350)
    assert [len(g.units) if isinstance(g, UnitGroup) else 1 for g in by_bytes] == [3, 3, 3, 1]
    assert group_units(units, 1, 1000) == units  # --group_inputs 1: every input alone
    assert len(group_units(units, 1000, 1 << 30, n_bins=2)) == 5  # 4 groups a worker at most 10 / 8 inputs


def test_runners_of_unknown_worker_count_group_by_key():
    """Where no step sees every unit (a cloud runner's Reshuffle), small inputs are grouped among
    those of one of 256 keys (not in finish_bundle, whose output Beam's Dask runner dropped: a run
    of no rows): every unit comes out once, small ones in groups within the bounds."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that

    from pipeline.beam.transforms import SpreadUnits

    units = [WorkUnit(source=f"/in/{i:04d}.txt", format="text", size=100) for i in range(2000)]
    big = WorkUnit(source="/in/big.txt", format="text", size=2 << 20)

    def check(items):
        sources = sorted(u.source for item in items for u in (item.units if isinstance(item, UnitGroup) else [item]))
        assert sources == sorted(u.source for u in [*units, big])  # each once
        groups = [item for item in items if isinstance(item, UnitGroup)]
        assert groups and all(len(g.units) <= 5 and g.size <= 1000 for g in groups)
        assert all(big not in g.units for g in groups)

    with TestPipeline() as pipeline:
        spread = (pipeline | beam.Create([*units, big])
                  | SpreadUnits(n_bins=None, group_inputs=5, group_bytes=1000))
        assert_that(spread, check)


def test_an_input_that_grows_inside_a_group_leaves_no_row_in_the_groups_parts(tmp_path, spec):
    """Its rows were made before the check: dropped from the group's parts (never written), and
    the next input's rows start where the previous kept input's end."""
    from pipeline.beam.run.config import PreprocessConfig
    from pipeline.beam.unit_groups import process_group
    from pipeline.beam.units import UnitContext
    from pipeline.beam.writing.arrow_io import read_part
    from pipeline.tokenizer.fast import FastTokenizer
    from pipeline.tokenizer.spec import build_tokenizer

    words = _words()
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text(file_text(i, words))
    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.0, min_tokens=4, max_seq_length=64)
    context = UnitContext.from_spec(spec, config, str(tmp_path / "temp"), FastTokenizer(build_tokenizer(spec), spec.json))
    group = UnitGroup(tuple(expand_inputs([str(tmp_path)])))
    with open(tmp_path / "1.txt", "a") as handle:
        handle.write("More text written after the listing. " * 20)
    first, grown, third = process_group(group, context)
    assert grown.skip_reason.startswith("unreadable: changed while being read: grew"), grown.skip_reason
    assert grown.parts == {} and first.counts[m.ROWS] and third.counts[m.ROWS]
    (path, rows), (path3, rows3) = first.parts[m.TRAIN], third.parts[m.TRAIN]
    assert path == path3 and (first.part_starts[m.TRAIN], third.part_starts[m.TRAIN]) == (0, rows)
    assert read_part(path, 64).ids.shape[0] == rows + rows3
