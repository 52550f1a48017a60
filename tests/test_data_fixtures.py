"""The excerpts in tests/data/books are the cuts `tests/data/make_books.py` names, byte for byte, of
the shared corpus' books (full tier, with the corpus), and every test that reads one finds it."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import BOOKS, EXCERPTS, REPO

MAKE_BOOKS = REPO / "tests" / "data" / "make_books.py"


def _make_books():
    spec = importlib.util.spec_from_file_location("make_books", MAKE_BOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_cut_is_shipped_and_nothing_else():
    make = _make_books()
    named = {cut.name for cut in make.CUTS} | set(make.HTML_PAGES)
    assert {path.name for path in EXCERPTS.iterdir()} == named


@pytest.mark.slow
@pytest.mark.corpus
def test_excerpts_are_the_cuts_of_the_corpus():
    make = _make_books()
    for cut in make.CUTS:
        assert (EXCERPTS / cut.name).read_bytes() == make.excerpt((BOOKS / cut.name).read_bytes(), cut), cut.name
    for name in make.HTML_PAGES:
        assert (EXCERPTS / name).read_bytes() == make.html_head((BOOKS / name).read_bytes()), name
