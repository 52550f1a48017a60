import numpy as np
import pytest

from pipeline.kernels.rows.chunking import RowLayout, chunk_tokens

LAYOUT = RowLayout(seq_len=8, cls_id=101, sep_id=102, pad_id=0, min_tokens=2)


def test_full_rows_and_kept_tail():
    tokens = np.arange(1000, 1014, dtype=np.int32)  # 14 = 2 full rows of 6 + tail of 2
    chunks = chunk_tokens(tokens, LAYOUT, np.int16)
    assert chunks.rows.dtype == np.int16 and chunks.rows.shape == (3, 8)
    np.testing.assert_array_equal(chunks.rows[0], [101, 1000, 1001, 1002, 1003, 1004, 1005, 102])
    np.testing.assert_array_equal(chunks.rows[2], [101, 1012, 1013, 102, 0, 0, 0, 0])
    np.testing.assert_array_equal(chunks.lengths, [8, 8, 4])
    assert chunks.dropped_tokens == 0
    content = np.concatenate([row[1 : n - 1] for row, n in zip(chunks.rows, chunks.lengths)])
    np.testing.assert_array_equal(content, tokens)


def test_short_tail_dropped_and_counted():
    chunks = chunk_tokens(np.arange(1000, 1013, dtype=np.int32), LAYOUT, np.int32)
    assert chunks.rows.shape == (2, 8) and chunks.dropped_tokens == 1


def test_empty_and_tiny_documents():
    assert chunk_tokens(np.zeros(0, np.int32), LAYOUT, np.int16).rows.shape == (0, 8)
    tiny = chunk_tokens(np.array([5], np.int32), LAYOUT, np.int16)
    assert tiny.rows.shape == (0, 8) and tiny.dropped_tokens == 1


def test_layout_validation():
    with pytest.raises(ValueError, match="max_seq_length"):
        RowLayout(seq_len=7, cls_id=1, sep_id=2, pad_id=0)
    with pytest.raises(ValueError, match="min_tokens"):
        RowLayout(seq_len=8, cls_id=1, sep_id=2, pad_id=0, min_tokens=7)

