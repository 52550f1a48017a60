"""Fixtures the job tests share."""

from __future__ import annotations

import pytest

from pipeline.sample import SAMPLE_BOOKS
from tests.conftest import run_preprocess


@pytest.fixture(scope="session")
def one_book(tmp_path_factory):
    """One short book (from the embedded sample, so it runs without the shared corpus) in rows of 32
    tokens, dynamic masks, 5% validation: about 200 training rows, cheap to train on for several steps."""
    out = tmp_path_factory.mktemp("one_book") / "data"
    run_preprocess([SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"], out, "--max_seq_length", "32", "--min_tokens",
                   "8", "--masking", "dynamic", "--validation_fraction", "0.05")
    return out
