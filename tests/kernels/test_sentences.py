"""Sentence splitting and sentence-aware packing on real books."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.kernels.common.hashing import short_row_targets
from pipeline.kernels.rows.chunking import pack_sentences
from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.kernels.text.sentences import split_sentences
from pipeline.tokenizer.encode import tokenize_sentences, tokenize_text
from pipeline.tokenizer.spec import build_tokenizer
from tests.conftest import binomial_tolerance, book_cases


@pytest.mark.parametrize("paragraph, expected", [
    ("Mr. Darcy bowed. She smiled.", ["Mr. Darcy bowed.", "She smiled."]),
    ('"Stop!" he cried. "Why?" she asked.', ['"Stop!" he cried.', '"Why?" she asked.']),
    ('She said, "No." Then she left.', ['She said, "No."', "Then she left."]),
    ("J. R. R. Tolkien wrote it... and more. The end.", ["J. R. R. Tolkien wrote it... and more.", "The end."]),
    ("It cost 5 dollars, e.g. a lot. Dr. Watson agreed.", ["It cost 5 dollars, e.g. a lot.", "Dr. Watson agreed."]),
    ("(He left.) Next one!", ["(He left.)", "Next one!"]),
])
def test_splitter_rules(paragraph, expected):
    assert list(split_sentences(paragraph)) == expected


@pytest.mark.parametrize("book", book_cases("classics__pride_and_prejudice.txt"))
def test_sentence_tokens_equal_the_documents(spec, book):
    text = clean_bytes(book.path.read_bytes()).text
    tokenizer = build_tokenizer(spec)
    ids, lengths = tokenize_sentences(tokenizer, text)
    np.testing.assert_array_equal(ids, tokenize_text(tokenizer, text))
    assert lengths.sum() == len(ids) and len(lengths) > (4000 if book.whole else 400)


@pytest.fixture(scope="module", params=book_cases("classics__pride_and_prejudice.txt"))
def packed(spec, request):
    text = clean_bytes(request.param.path.read_bytes()).text
    ids, lengths = tokenize_sentences(build_tokenizer(spec), text)
    layout = spec.layout(128, 8)
    targets = short_row_targets(np.uint64(5), len(lengths) + len(ids) // 126 + 2, 0.1, 126)
    return ids, lengths, layout, targets, pack_sentences(ids, lengths, layout, np.int16, targets)


def test_rows_end_at_sentence_ends_and_nothing_is_lost(packed, spec):
    ids, lengths, layout, targets, chunks = packed
    ends = set(np.cumsum(lengths).tolist())
    position, split_rows = 0, 0
    for row, n in zip(chunks.rows, chunks.lengths):
        content = row[1 : n - 1]
        np.testing.assert_array_equal(content, ids[position : position + len(content)])
        position += len(content)
        if position not in ends:  # only a sentence longer than a row may be cut mid-sentence
            assert len(content) == layout.content_len
            split_rows += 1
    assert position + chunks.dropped_tokens == len(ids)
    assert split_rows < 0.05 * len(chunks.rows)


def test_short_seq_prob_share(packed):
    ids, lengths, layout, targets, chunks = packed
    n = len(targets)
    assert abs((targets > 0).mean() - 0.1) < binomial_tolerance(0.1, n)
    short = targets[: len(chunks.rows)] > 0
    # a short-target row holds at most its target (unless one sentence alone is longer)
    content = chunks.lengths - 2
    assert (content[short] <= np.maximum(targets[: len(chunks.rows)][short], 126)).all()
    assert content[short].mean() < 0.75 * content[~short].mean()


@pytest.mark.parametrize("paragraph, expected", [
    ("He served in the U.S. Army during the war. Afterwards he returned.",
     ["He served in the U.S. Army during the war.", "Afterwards he returned."]),
    ("It was late... Very late. The candles had burned down.",
     ["It was late... Very late.", "The candles had burned down."]),
    ("The meeting was at 10 a.m. on Monday. Everyone came late.",
     ["The meeting was at 10 a.m. on Monday.", "Everyone came late."]),
])
def test_acronyms_and_ellipses_do_not_end_a_sentence(paragraph, expected):
    assert list(split_sentences(paragraph)) == expected


def test_golden_book_sentences():
    """The golden set the splitter was chosen on (benchmarks/sentences.py: ours 0.92 of paragraphs
    exactly right, pysbd 0.88, blingfire 0.80, punkt trained on the corpus 0.64)."""
    import json
    from pathlib import Path

    golden = json.loads((Path(__file__).parents[2] / "benchmarks/data/sentences_golden.json").read_text())
    exact = sum(list(split_sentences(" ".join(s))) == s for s in golden)
    assert exact >= 23, exact  # 2 of 25 are known misses: "2s. 6d." and a roman numeral "Chapter I."
