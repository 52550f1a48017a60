"""The Beam composites on the FnApiRunner with a few inline books."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.beam.arrow_io import read_part
from pipeline.beam.config import PreprocessConfig
from pipeline.beam.readers import expand_inputs
from pipeline.beam.transforms import TokenizeAndChunk
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
        results = (p | beam.Create(units) | TokenizeAndChunk(spec=spec, config=config, temp_dir=temp_dir)
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
