"""The Beam composites on the FnApiRunner with a few inline books."""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.transforms import TokenizeAndChunk
from pipeline.beam.writing.arrow_io import read_part
from schemas import manifest as m

BOOKS = {
    "a.txt": "The first book. " * 400,
    "b.txt": "\ufeffSecond book, with a BOM.\r\n\r\n" + "Another paragraph here. " * 300,
    "c.txt": "<!DOCTYPE html><html><body>404</body></html>",
    "d.txt": "Too short.",
}


@pytest.fixture
def inline_books(tmp_path):
    for name, text in BOOKS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_tokenize_and_chunk_reports_every_input(inline_books, tmp_path, spec):
    config = PreprocessConfig(inputs=(str(inline_books),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.0)
    temp_dir = str(tmp_path / "parts")
    units = expand_inputs([str(inline_books)])
    options = PipelineOptions(["--runner=FnApiRunner"])
    with TestPipeline(options=options) as p:
        results = (p | beam.Create(units)
                   | TokenizeAndChunk(spec=spec, config=config, temp_dir=temp_dir, group_inputs=1)  # a part each
                   | beam.Map(lambda r: (r.source.rsplit("/", 1)[1], r.skip_reason, r.counts[m.ROWS],
                                         r.counts[m.DOCUMENTS_TOO_SHORT])))
        assert_that(results, equal_to([
            ("a.txt", None, 4, 0),
            ("b.txt", None, 3, 0),
            ("c.txt", "not text: an HTML/XML page", 0, 0),
            ("d.txt", None, 0, 1),
        ]))
    parts = sorted((tmp_path / "parts").glob("*-train.arrow"))
    assert len(parts) == 2
    for path in parts:
        rows = read_part(str(path), 512)
        assert rows.ids.shape[0] in (3, 4) and rows.ids.shape[1] == 512
        assert (rows.ids[:, 0] == spec.cls_id).all()
        assert len(np.unique(rows.seeds)) == rows.ids.shape[0]


def test_inputs_are_listed_in_the_pipeline_not_carried_in_the_job_graph(tmp_path, spec):
    """The graph holds the --input patterns only: 4,000 more files leave its size unchanged (it
    grew by about 11 bytes a file when the launcher's listing was embedded)."""
    from pipeline.beam.transforms import Preprocess

    def graph_bytes(files: int) -> int:
        folder = tmp_path / f"in{files:05d}"  # names of one length
        folder.mkdir()
        for i in range(files):
            (folder / f"doc{i:05d}.txt").write_text(f"Document {i}, a short paragraph.\n")
        config = PreprocessConfig(inputs=(str(folder),), output=str(tmp_path / "out"), tokenizer="bert")
        pipeline = beam.Pipeline()
        _ = pipeline | Preprocess(units=[], patterns=[str(folder)], spec=spec, config=config, local_workers=2)
        return len(pipeline.to_runner_api().SerializeToString())

    # the serialized graph varies by a kilobyte or two from build to build; 4,000 embedded units added ~45 KB
    assert graph_bytes(4010) - graph_bytes(10) < 8_000


def test_a_file_two_patterns_match_is_read_once_and_the_output_inside_an_input_is_not_read(inline_books, tmp_path):
    from jobs.preprocess import run
    from tests.conftest import TOKENIZER_DIR

    out = tmp_path / "out"
    run(["--input", str(inline_books), "--input", str(inline_books / "*.txt"), "--input", str(inline_books / "a.txt"),
         "--output", str(out), "--tokenizer", str(TOKENIZER_DIR), "--masking", "dynamic"])
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    assert manifest[m.KEY_COUNTS][m.FILES_READ] == len(BOOKS)  # `out` lies inside the input folder
    assert sorted(e[m.KEY_PATH].rsplit("/", 1)[1] for e in manifest[m.KEY_INPUTS]) == ["a.txt", "b.txt", "d.txt"]
