"""A split text input's stitch under at-least-once runners, and a file changed between its reads
(issue 23 point 5)."""

from __future__ import annotations

import os

from pipeline.beam.config import PreprocessConfig
from pipeline.beam.ranges import scan_for_ranges, stitch_ranges, tokenize_range
from pipeline.beam.readers import expand_inputs, split_large_inputs
from pipeline.beam.units import StageClock
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m
from schemas.shard import id_dtype_for_vocab


def _split_run(tmp_path, spec):
    text = "".join(f"Paragraph {i} tells of tea, time and the river. " * 8 + "\n\n" for i in range(60))
    path = tmp_path / "book.txt"
    path.write_text(text)
    config = PreprocessConfig(inputs=(str(path),), output=str(tmp_path / "out"), tokenizer="bert", split_bytes=4096,
                              validation_fraction=0.0)
    (unit,) = split_large_inputs(expand_inputs([str(path)]), config.split_bytes)
    tokenizer = FastTokenizer(build_tokenizer(spec), spec.json)
    layout, dtype = spec.layout(config.max_seq_length, config.min_tokens), id_dtype_for_vocab(spec.vocab_size)
    temp = str(tmp_path / "temp")
    os.makedirs(temp)
    tasks = scan_for_ranges(unit, tokenizer, layout, dtype, config, temp, StageClock())
    assert isinstance(tasks, list) and len(tasks) > 2
    tokens = [tokenize_range(task, tokenizer, layout, config, temp) for task in tasks]
    return path, (layout, dtype, config, temp), tokens


def test_a_retried_stitch_returns_its_saved_result(tmp_path, spec):
    """The retry deleted nothing it needed before: it raised FileNotFoundError on the range files."""
    _, args, tokens = _split_run(tmp_path, spec)
    first = stitch_ranges(tokens, *args)
    again = stitch_ranges(tokens, *args)
    assert first.skip_reason is None and first.counts[m.ROWS] > 0
    assert again == first


def test_an_input_changed_between_scan_and_stitch_is_skipped_with_the_reason(tmp_path, spec):
    path, args, tokens = _split_run(tmp_path, spec)
    with open(path, "a") as handle:
        handle.write("A paragraph added while the ranges were tokenized.\n")
    result = stitch_ranges(tokens, *args)
    assert result.skip_reason.startswith("unreadable: changed while being read"), result.skip_reason
    assert result.parts == {} and result.counts[m.ROWS] == 0 and result.counts[m.FILES_SKIPPED] == 1
