"""Property-based tests: arbitrary input never crashes cleaning, chunking or masking, and their
invariants always hold."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.kernels.rows.chunking import RowLayout, chunk_tokens
from pipeline.kernels.rows.masking import mask_rows
from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.spec import build_tokenizer
from schemas.shard import IGNORE_INDEX

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.binary(max_size=4000))
def test_cleaning_arbitrary_bytes_returns_text_or_a_reason(data):
    try:
        cleaned = clean_bytes(data)
    except NotText as reason:
        assert str(reason)
        return
    assert "\r" not in cleaned.text and cleaned.text.strip()
    assert 0 <= cleaned.replaced_bytes <= len(data)


@SETTINGS
@given(st.text(max_size=3000))
def test_tokenizing_arbitrary_text_gives_ordinary_ids(spec, text):
    ids = tokenize_text(build_tokenizer(spec), text)
    assert ids.dtype == np.int32
    assert not np.isin(ids, [spec.cls_id, spec.sep_id, spec.pad_id, spec.mask_id]).any()
    assert ((ids >= 0) & (ids < spec.vocab_size)).all()


@SETTINGS
@given(n=st.integers(0, 3000), seq_len=st.integers(8, 600), min_tokens=st.integers(0, 6))
def test_chunk_layout_invariants(n, seq_len, min_tokens):
    layout = RowLayout(seq_len=seq_len, cls_id=101, sep_id=102, pad_id=0, min_tokens=min(min_tokens, seq_len - 2))
    tokens = np.arange(n, dtype=np.int32) % 20000 + 1000
    chunks = chunk_tokens(tokens, layout, np.int16)
    rows, lengths = chunks.rows, chunks.lengths
    assert rows.shape[1] == seq_len and (lengths <= seq_len).all()
    if rows.shape[0]:
        assert (rows[:, 0] == 101).all() and (rows[np.arange(len(rows)), lengths - 1] == 102).all()
        assert (lengths[:-1] == seq_len).all()
        positions = np.arange(seq_len)
        assert (rows[positions[None, :] >= lengths[:, None]] == 0).all()
    kept = int((lengths - 2).sum()) if rows.shape[0] else 0
    assert kept + chunks.dropped_tokens == n


@SETTINGS
@given(data=st.data(), n_rows=st.integers(1, 8), seq_len=st.integers(8, 64), epoch=st.integers(0, 10**6),
       p=st.floats(0, 1), mask_p=st.floats(0, 1))
def test_masking_never_touches_special_positions(rule, data, n_rows, seq_len, epoch, p, mask_p):
    from pipeline.kernels.rows.masking import MaskingRule

    random_p = data.draw(st.floats(0, 1 - mask_p))
    custom = MaskingRule(rule.is_special, rule.replacement_pool, rule.mask_id, p, mask_p, random_p)
    ids = np.asarray(data.draw(st.lists(st.lists(st.sampled_from([0, 100, 101, 102, 103, 999, 2000, 30521]),
                                                 min_size=seq_len, max_size=seq_len),
                                        min_size=n_rows, max_size=n_rows)), dtype=np.int16)
    seeds = np.asarray(data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=n_rows, max_size=n_rows)),
                       dtype=np.uint64)
    masked, labels, counts = mask_rows(ids, seeds, epoch, custom)
    special = custom.is_special[ids]
    assert (masked[special] == ids[special]).all() and (labels[special] == IGNORE_INDEX).all()
    selected = labels != IGNORE_INDEX
    assert (labels[selected] == ids[selected]).all()
    eligible_rows = (~special).any(axis=1)
    assert (selected.any(axis=1) >= eligible_rows).all()  # at least one target where possible
    assert counts[0] == selected.sum() == counts[1] + counts[2] + counts[3]
