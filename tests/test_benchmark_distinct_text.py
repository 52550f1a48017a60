"""The benchmarks' distinct text (issue 32): the corpus generator, the peers' exactness check and the
job cost fit, on small inputs (no speed is asserted: speed lives in benchmarks/README.md)."""

from __future__ import annotations

import re

import pytest

from benchmarks.generate_corpus import fit_heaps, generate, heaps_points, learn, main
from pipeline.sample import SAMPLE_BOOKS


@pytest.fixture(scope="module")
def model():
    return learn(SAMPLE_BOOKS)  # three real books, about 60,000 words


def _paragraphs(paths) -> list[str]:
    return [p for path in paths for p in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")) if p.strip()]


def test_generated_text_is_deterministic_distinct_and_grows_its_vocabulary_as_the_books_do(model, tmp_path):
    first = generate(model, tmp_path / "a", mb=1.0, seed=7, book_mb=0.3)
    again = generate(model, tmp_path / "b", mb=1.0, seed=7, book_mb=0.3)
    other = generate(model, tmp_path / "c", mb=0.2, seed=8, book_mb=0.3)
    assert [p.name for p in first] == [p.name for p in again] and len(first) == 4
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(first, again))
    assert other[0].read_bytes()[:5000] != first[0].read_bytes()[:5000]
    assert 0.99e6 <= sum(p.stat().st_size for p in first) <= 1.01e6
    paragraphs = _paragraphs(first)
    assert len(paragraphs) > 1500 and len(set(paragraphs)) == len(paragraphs)  # no paragraph repeated
    # the curve counted from the files follows the books' fit: the generator adds exactly the new
    # words that keep V on K n^beta at each paragraph's end, spread at random inside it, so between
    # ends V strays by about the square root of a paragraph's new words (a few words: 3% of V at
    # 10^3 words, under 1% from 10^4 on), and the fitted exponents agree to the third decimal
    generated = heaps_points(p.read_text(encoding="utf-8") for p in first)
    assert generated[-1][0] > 150_000
    for n, v in generated:
        assert abs(v / (model.k * n ** model.beta) - 1) < (0.03 if n < 10_000 else 0.01), (n, v)
    k, beta = fit_heaps(generated)
    assert abs(beta - model.beta) < 0.01 and abs(k / model.k - 1) < 0.1, (k, beta, model.k, model.beta)
    assert 0.4 < model.beta < 0.8  # English books


def test_the_generator_prints_both_curves(tmp_path, capsys):
    report = main(["--out", str(tmp_path / "g"), "--mb", "0.3", "--books", str(SAMPLE_BOOKS),
                   "--json", str(tmp_path / "g.json")])
    printed = capsys.readouterr().out
    assert "real books K" in printed and "generated K" in printed and "V real fit" in printed
    assert abs(report["generated"]["beta"] - report["real"]["beta"]) < 0.02
    assert (tmp_path / "g.json").is_file()


def test_too_little_text_to_fit_is_a_clear_error(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "short.txt").write_text("A few words only.\n")
    with pytest.raises(ValueError, match="at least 20,000 words"):
        learn(books)
    with pytest.raises(ValueError, match="no text to learn from"):
        learn(tmp_path / "empty_missing")
