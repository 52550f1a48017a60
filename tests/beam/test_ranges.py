"""A split text input's stitch under at-least-once runners, and a file changed between its reads
(issue 23 point 5) or while it was read once (issue 36 item 4)."""

from __future__ import annotations

import dataclasses
import os

from pipeline.beam.input_splits import scan_for_splits, stitch_splits, tokenize_split
from pipeline.beam.reading.work_units import expand_inputs, split_large_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import StageClock, UnitContext, process_unit
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m


def _split_run(tmp_path, spec):
    text = "".join(f"Paragraph {i} tells of tea, time and the river. " * 8 + "\n\n" for i in range(60))
    path = tmp_path / "book.txt"
    path.write_text(text)
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="bert", split_bytes=4096,
                              validation_fraction=0.0)
    (unit,) = split_large_inputs(expand_inputs([str(path)]), config.split_bytes)
    temp = str(tmp_path / "temp")
    os.makedirs(temp)
    context = _worker(spec, config, temp)
    tasks = scan_for_splits(unit, context, StageClock())
    assert isinstance(tasks, list) and len(tasks) > 2
    tokens = [tokenize_split(task, context) for task in tasks]
    return path, context, tokens


def test_a_retried_stitch_returns_its_saved_result(tmp_path, spec):
    """The retry deleted nothing it needed before: it raised FileNotFoundError on the splits' token files."""
    _, context, tokens = _split_run(tmp_path, spec)
    first = stitch_splits(tokens, context)
    again = stitch_splits(tokens, context)
    assert first.skip_reason is None and first.counts[m.ROWS] > 0
    assert again == first


def test_an_input_changed_between_scan_and_stitch_is_skipped_with_the_reason(tmp_path, spec):
    path, context, tokens = _split_run(tmp_path, spec)
    with open(path, "a") as handle:
        handle.write("A paragraph added while the input splits were tokenized.\n")
    result = stitch_splits(tokens, context)
    assert result.skip_reason.startswith("unreadable: changed while being read"), result.skip_reason
    assert result.parts == {} and result.counts[m.ROWS] == 0 and result.counts[m.FILES_SKIPPED] == 1


def _worker(spec, config, temp_dir) -> UnitContext:
    return UnitContext.from_spec(spec, config, str(temp_dir), FastTokenizer(build_tokenizer(spec), spec.json))


def test_a_file_that_grows_while_it_is_read_once_is_skipped_naming_the_growth(tmp_path, spec):
    """A small input is read once (its first pass is kept): the size and time it was listed with were
    never checked again, so the manifest recorded the listed size and the tokens of more."""
    book, records = tmp_path / "book.txt", tmp_path / "records.jsonl"
    book.write_text("A short book about tea and the river, read at once. " * 40)
    records.write_text("".join(f'{{"text": "record {i} about tea and the river"}}\n' for i in range(20)))
    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.0, min_tokens=4)
    worker = _worker(spec, config, "")
    for path, more in ((book, "More text written while the job read it. " * 10),
                       (records, '{"text": "a record appended while the job read the file"}\n')):
        (unit,) = expand_inputs([str(path)])
        listed = path.stat().st_size
        fresh = dataclasses.replace(worker, temp_dir=str(tmp_path / "fresh" / path.name))
        assert process_unit(unit, fresh).skip_reason is None
        with open(path, "a") as handle:  # what the one read reads: the listed bytes and more
            handle.write(more)
        result = process_unit(unit, dataclasses.replace(worker, temp_dir=str(tmp_path / "grown" / path.name)))
        assert result.skip_reason == (f"unreadable: changed while being read: grew from {listed:,} to "
                                      f"{path.stat().st_size:,} bytes since it was listed"), result.skip_reason
        assert result.parts == {} and result.counts[m.ROWS] == 0 and result.counts[m.FILES_SKIPPED] == 1


def test_an_unsplittable_input_marked_for_splitting_that_grows_is_skipped(tmp_path, spec):
    """UTF-16 over --split_bytes: its scan finds no input splits and the scanning worker tokenizes it whole."""
    path = tmp_path / "book.txt"
    path.write_bytes(("A UTF-16 book about tea and the river. " * 200).encode("utf-16"))
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="bert", split_bytes=4096,
                              validation_fraction=0.0, min_tokens=4)
    (unit,) = split_large_inputs(expand_inputs([str(path)]), config.split_bytes)
    assert unit.split_bytes
    with open(path, "ab") as handle:
        handle.write("More text.".encode("utf-16-le"))
    os.makedirs(tmp_path / "temp")
    result = scan_for_splits(unit, _worker(spec, config, tmp_path / "temp"), StageClock())
    assert not isinstance(result, list)
    assert result.skip_reason.startswith("unreadable: changed while being read: grew from "), result.skip_reason


def test_a_file_rewritten_to_the_same_size_while_it_is_read_once_is_skipped(tmp_path, spec):
    path = tmp_path / "book.txt"
    path.write_text("A short book about tea and the river, read at once. " * 40)
    (unit,) = expand_inputs([str(path)])
    path.write_text("A short book about ale and the ocean, read at once. " * 40)  # same size, new content
    later = int(unit.modified * 1e9) + 5_000_000_000
    os.utime(path, ns=(later, later))
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.0, min_tokens=4)
    result = process_unit(unit, _worker(spec, config, tmp_path / "temp"))
    assert result.skip_reason.startswith("unreadable: changed while being read: modified at "), result.skip_reason
    assert result.counts[m.ROWS] == 0
