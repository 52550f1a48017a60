"""Whole-word and span masking on real book tokens."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.kernels.common.hashing import mask_seeds, row_keys
from pipeline.kernels.rows.chunking import chunk_tokens
from pipeline.kernels.rows.masking import mask_rows
from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.spec import build_tokenizer
from schemas.shard import IGNORE_INDEX
from tests.conftest import binomial_tolerance, book_cases


@pytest.fixture(scope="module", params=book_cases("classics__pride_and_prejudice.txt"))
def book_rows(spec, request):
    text = clean_bytes(request.param.path.read_bytes()).text
    chunks = chunk_tokens(tokenize_text(build_tokenizer(spec), text), spec.layout(512, 64), np.int16)
    return chunks.rows, mask_seeds(row_keys(np.uint64(99), chunks.rows.shape[0]), 0)


def _words(row, rule):
    """(start, end) of every word of a row: a non-special non-continuation id and its continuations."""
    words, j = [], 0
    while j < len(row):
        if rule.is_special[row[j]]:
            j += 1
            continue
        end = j + 1
        while end < len(row) and not rule.is_special[row[end]] and rule.is_continuation[row[end]]:
            end += 1
        words.append((j, end))
        j = end
    return words


def test_whole_word_selects_every_piece_and_keeps_the_ratio(spec, book_rows):
    rows, seeds = book_rows
    rule = spec.masking_rule(0.15, 0.8, 0.1, unit="word")
    assert len(spec.continuation_ids) == 5828
    masked, labels, counts = mask_rows(rows, seeds, 0, rule)
    n_words = n_selected_words = 0
    lengths, chosen = [], []
    multi_piece_selected = 0
    for r in range(rows.shape[0]):
        for start, end in _words(rows[r], rule):
            targets = labels[r, start:end] != IGNORE_INDEX
            assert targets.all() or not targets.any(), (r, start, end)  # all pieces together
            n_words += 1
            n_selected_words += int(targets.all())
            multi_piece_selected += int(targets.all() and end - start > 1)
            lengths.append(end - start)
            chosen.append(bool(targets.all()))
    assert multi_piece_selected > 50
    assert abs(n_selected_words / n_words - 0.15) < binomial_tolerance(0.15, n_words)
    lengths, chosen = np.array(lengths), np.array(chosen)
    token_sd = np.sqrt(0.15 * 0.85 * (lengths ** 2).sum()) / lengths.sum()
    assert abs(lengths[chosen].sum() / lengths.sum() - 0.15) < 5 * token_sd
    n = int(counts[0])
    assert abs(counts[1] / n - 0.8) < binomial_tolerance(0.8, n)
    assert abs(counts[2] / n - 0.1) < binomial_tolerance(0.1, n)  # random replacement stays on
    assert not rule.is_special[masked[(labels != IGNORE_INDEX) & (masked != labels) & (masked != spec.mask_id)]].any()


def _truncated_geometric(p, max_span):
    """SpanBERT's length distribution in words: Geometric(p) renormalised on [1, max_span]."""
    k = np.arange(1, max_span + 1)
    pmf = p * (1 - p) ** (k - 1)
    return pmf / pmf.sum()


def test_span_lengths_follow_spanberts_truncated_geometric(spec, book_rows):
    rows, seeds = book_rows
    rule = spec.masking_rule(0.15, 0.8, 0.1, unit="span", span_p=0.2, max_span=10)
    hist = np.zeros(11, dtype=np.int64)
    for epoch in range(8):
        mask_rows(rows, seeds, epoch, rule, hist)
    n = hist[1:].sum()
    expected = _truncated_geometric(0.2, 10)
    assert abs((np.arange(1, 11) * expected).sum() - 3.8) < 0.01  # SpanBERT: mean span 3.8 words
    observed = hist[1:] / n
    for k in range(10):
        assert abs(observed[k] - expected[k]) < binomial_tolerance(expected[k], n), (k, observed, expected)
    assert observed[-1] < 0.05  # not clipped: the clipped distribution put 13% at max_span


def test_spans_cover_whole_words(spec, book_rows):
    """Every span starts at a word start; only the span that reaches a row's budget may end inside
    a word, so at most one partly covered word a row."""
    rows, seeds = book_rows
    rule = spec.masking_rule(0.15, 0.8, 0.1, unit="span")
    _, labels, _ = mask_rows(rows, seeds, 0, rule)
    for r in range(rows.shape[0]):
        partial = 0
        for start, end in _words(rows[r], rule):
            covered = (labels[r, start:end] != IGNORE_INDEX).sum()
            partial += int(0 < covered < end - start)
            if covered:
                assert labels[r, start] != IGNORE_INDEX, (r, start, end)  # covered from its start
        assert partial <= 1, r


def test_spans_keep_the_ratio_and_the_rules(spec, book_rows):
    rows, seeds = book_rows
    rule = spec.masking_rule(0.15, 0.8, 0.1, unit="span")
    eligible = ~rule.is_special[rows]
    n_eligible = eligible.sum(axis=1)
    selected_total = 0
    for epoch in range(4):
        masked, labels, counts = mask_rows(rows, seeds, epoch, rule)
        selected = labels != IGNORE_INDEX
        per_row = selected.sum(axis=1)
        # the budget is p * eligible rounded down or up at random
        assert ((per_row == np.floor(0.15 * n_eligible)) | (per_row == np.ceil(0.15 * n_eligible))).all()
        assert not (selected & ~eligible).any()
        selected_total += int(selected.sum())
        n = int(counts[0])
        assert abs(counts[1] / n - 0.8) < binomial_tolerance(0.8, n)
    # random rounding keeps the mean at p exactly (a rounded budget gave 14.5% on 64-token rows)
    rounding_sd = np.sqrt(4 * rows.shape[0] * 0.25) / (4 * n_eligible.sum())
    assert abs(selected_total / (4 * n_eligible.sum()) - 0.15) < 5 * rounding_sd + 1e-9
    short = rows[:, :66].copy()
    short[:, 65] = spec.sep_id
    _, short_labels, _ = mask_rows(short, seeds, 0, rule)
    assert abs((short_labels != IGNORE_INDEX).sum() / (~rule.is_special[short]).sum() - 0.15) < 0.005
    runs = np.diff(np.concatenate([[0], selected[0].astype(int), [0]]))
    assert (np.flatnonzero(runs == -1) - np.flatnonzero(runs == 1)).max() > 3  # real spans, not tokens


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--whole_word_mask", "--span_mask"])
def test_job_static_and_dynamic_agree_and_validate(small_books, tmp_path, flag, capsys):
    """The unit is recorded in the manifest and used everywhere: static copies, the loader's
    dynamic masks and jobs.validate."""
    import datasets

    from jobs.validate import run as validate
    from pipeline.consumers.loading import MlmShardDataset
    from tests.conftest import run_preprocess

    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    run_preprocess([small_books], static, flag, "--dupe_factor", "2", "--max_seq_length", "128")
    run_preprocess([small_books], dynamic, flag, "--masking", "dynamic", "--max_seq_length", "128")
    stored = datasets.load_from_disk(str(static))["train"].with_format("numpy")
    n = len(MlmShardDataset(str(dynamic)))
    for epoch in range(2):
        loader_rows = MlmShardDataset(str(dynamic), epoch=epoch).__getitems__(list(range(n)))
        np.testing.assert_array_equal(np.asarray(stored["labels"][epoch * n:(epoch + 1) * n]), loader_rows["labels"])
    assert validate([str(static)]) == 0 and validate([str(dynamic)]) == 0
    capsys.readouterr()
