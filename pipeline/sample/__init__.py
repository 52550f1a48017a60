"""The embedded sample that makes a fresh clone work on its own: three short public-domain books from
Project Gutenberg (as downloaded, header and licence kept) and the `bert-base-uncased` tokenizer
(Apache-2.0). `python -m jobs.preprocess --output out` runs on them when no --input/--tokenizer is
given; the tests use them when the big shared corpus is absent. See README.md here for the sources."""

from __future__ import annotations

from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent
SAMPLE_BOOKS = SAMPLE_DIR / "books"
SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer"
