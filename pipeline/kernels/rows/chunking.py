"""Cut token streams into fixed-length rows: [CLS] content [SEP] [PAD]... (pure numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas.shard import MIN_SEQ_LEN


@dataclass(frozen=True)
class RowLayout:
    """Special ids and lengths of a row. `seq_len` slots: [CLS], up to seq_len-2 tokens, [SEP], [PAD]s."""

    seq_len: int
    cls_id: int
    sep_id: int
    pad_id: int
    min_tokens: int = 64
    unk_id: int = -1  # counted per input; -1 when the tokenizer has none

    def __post_init__(self) -> None:
        if self.seq_len < MIN_SEQ_LEN:
            raise ValueError(f"max_seq_length must be >= {MIN_SEQ_LEN}, got {self.seq_len}")
        if not 0 <= self.min_tokens <= self.content_len:
            raise ValueError(f"min_tokens must be in [0, {self.content_len}], got {self.min_tokens}")

    @property
    def content_len(self) -> int:
        return self.seq_len - 2


@dataclass(frozen=True)
class Chunks:
    """Rows cut from one token stream.

    Attributes:
        rows: shape (n_rows, seq_len), the dtype asked for.
        lengths: int32, shape (n_rows,): real tokens per row including [CLS] and [SEP].
        dropped_tokens: content tokens of a final short row that was dropped (0 if none).
    """

    rows: np.ndarray
    lengths: np.ndarray
    dropped_tokens: int


def chunk_tokens(tokens: np.ndarray, layout: RowLayout, dtype: np.dtype) -> Chunks:
    """Split one document's content tokens into rows; only the last row may be short.

    Args:
        tokens: int, shape (n,): content tokens without specials.
        layout: row layout and the minimum content length of a final short row.
        dtype: the id dtype of the rows (int16 or int32).
    """
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
    width = layout.content_len
    n = tokens.shape[0]
    n_full, tail = divmod(n, width)
    keep_tail = tail > 0 and tail >= layout.min_tokens
    n_rows = n_full + int(keep_tail)
    rows = np.full((n_rows, layout.seq_len), layout.pad_id, dtype=dtype)
    lengths = np.full(n_rows, layout.seq_len, dtype=np.int32)
    if n_full:
        rows[:n_full, 1 : width + 1] = tokens[: n_full * width].reshape(n_full, width)
        rows[:n_full, width + 1] = layout.sep_id
    if keep_tail:
        rows[n_full, 1 : tail + 1] = tokens[n_full * width :]
        rows[n_full, tail + 1] = layout.sep_id
        lengths[n_full] = tail + 2
    rows[:, 0] = layout.cls_id
    return Chunks(rows=rows, lengths=lengths, dropped_tokens=0 if keep_tail else tail)


def _sentence_bounds(sentence_lengths: np.ndarray, width: int, target_of_row, first_row: int = 0,
                     start: int = 0) -> tuple[list[tuple[int, int]], int]:
    """The greedy packing of `pack_sentences`: (start, stop) in tokens of each finished row, and
    where the open (last, unfinished) row starts. Rows are numbered from `first_row` and tokens
    from `start`, so a stream can resume from its open row."""
    bounds: list[tuple[int, int]] = []
    row_start = position = start
    for length in sentence_lengths.tolist():
        if position + length - row_start > target_of_row(first_row + len(bounds)) and position > row_start:
            bounds.append((row_start, position))  # the row ends before this sentence
            row_start = position
        end = position + length
        while end - row_start > width:  # a sentence longer than a row is split, never dropped
            bounds.append((row_start, row_start + width))
            row_start += width
        position = end
    return bounds, row_start


def _rows_from_bounds(tokens: np.ndarray, bounds: list[tuple[int, int]], offset: int, layout: RowLayout,
                      dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    rows = np.full((len(bounds), layout.seq_len), layout.pad_id, dtype=dtype)
    lengths = np.empty(len(bounds), dtype=np.int32)
    for r, (start, stop) in enumerate(bounds):
        rows[r, 1 : stop - start + 1] = tokens[start - offset : stop - offset]
        rows[r, stop - start + 1] = layout.sep_id
        lengths[r] = stop - start + 2
    rows[:, 0] = layout.cls_id
    return rows, lengths


def pack_sentences(tokens: np.ndarray, sentence_lengths: np.ndarray, layout: RowLayout, dtype: np.dtype,
                   short_targets: np.ndarray) -> Chunks:
    """Pack whole sentences into rows: a row ends at a sentence end; a sentence longer than a row is
    split across rows (never dropped). Row r aims at `short_targets[r]` content tokens when that
    is > 0 (BERT's short_seq_prob rows), else at the full width; only the last row may fall under
    `min_tokens`, and then it is dropped and counted.

    Args:
        tokens: int, shape (n,): the document's content tokens.
        sentence_lengths: int, shape (s,): tokens per sentence, summing to n.
        short_targets: int, shape (>= rows,): per-row shorter targets, 0 for full rows.
    """
    if int(sentence_lengths.sum()) != tokens.shape[0]:
        raise ValueError("sentence lengths must sum to the number of tokens")
    width = layout.content_len

    def target(row: int) -> int:
        wanted = int(short_targets[row]) if row < short_targets.shape[0] else 0
        return wanted if 0 < wanted < width else width

    bounds, row_start = _sentence_bounds(sentence_lengths, width, target)
    position = tokens.shape[0]
    dropped = 0
    if position > row_start:
        if position - row_start >= layout.min_tokens:
            bounds.append((row_start, position))
        else:
            dropped = position - row_start
    rows, lengths = _rows_from_bounds(tokens, bounds, 0, layout, dtype)
    return Chunks(rows=rows, lengths=lengths, dropped_tokens=dropped)


class RowStream:
    """The rows of one token stream fed in pieces: exactly what `chunk_tokens` (or, given sentence
    lengths, `pack_sentences`) makes of the whole stream, each row handed out once it is final.
    Holds only the tokens of the open row, so a document of any length takes bounded memory.

    Args:
        short_targets: for sentence packing, `f(n)` -> int32 (n,): the targets of rows 0..n-1 (as
            `short_row_targets`); None packs full rows.
    """

    def __init__(self, layout: RowLayout, dtype: np.dtype, sentences: bool = False, short_targets=None) -> None:
        self._layout = layout
        self._dtype = dtype
        self._sentences = sentences
        self._short_targets = short_targets
        self._targets = np.zeros(0, dtype=np.int32)
        self._pending = np.zeros(0, dtype=np.int32)
        # sentence packing: the lengths of the open row's sentences (the first may be a split one's rest)
        self._pending_lengths: list[int] = []
        self._start = 0  # stream position of the open row's first token
        self.rows = 0
        self.tokens = 0
        self.closed = False

    def _target(self, row: int) -> int:
        width = self._layout.content_len
        if self._short_targets is None:
            return width
        if row >= self._targets.shape[0]:
            self._targets = self._short_targets(2 * row + 64)
        wanted = int(self._targets[row])
        return wanted if 0 < wanted < width else width

    def _emit(self, rows: np.ndarray, lengths: np.ndarray) -> Chunks:
        self.rows += rows.shape[0]
        return Chunks(rows=rows, lengths=lengths, dropped_tokens=0)

    def add(self, tokens: np.ndarray, sentence_lengths: np.ndarray | None = None) -> Chunks:
        """Feed the next tokens (with their sentence lengths when packing sentences); returns the rows
        that became final."""
        self.tokens += tokens.shape[0]
        pending = np.concatenate([self._pending, tokens]) if self._pending.shape[0] else tokens
        width = self._layout.content_len
        if not self._sentences:
            n_full = pending.shape[0] // width
            done = chunk_tokens(pending[: n_full * width], self._layout, self._dtype)
            self._pending = pending[n_full * width:].copy()
            self._start += n_full * width
            return self._emit(done.rows, done.lengths)
        added = sentence_lengths.tolist() if sentence_lengths is not None else []
        lengths = np.asarray(self._pending_lengths + added, dtype=np.int64)
        bounds, row_start = _sentence_bounds(lengths, width, self._target, self.rows, self._start)
        rows, row_lengths = _rows_from_bounds(pending, bounds, self._start, self._layout, self._dtype)
        ends = self._start + np.cumsum(lengths)
        keep = ends > row_start
        rest = ends[keep]
        self._pending_lengths = np.diff(np.concatenate([[row_start], rest])).tolist() if rest.shape[0] else []
        self._pending = pending[row_start - self._start:].copy()
        self._start = row_start
        return self._emit(rows, row_lengths)

    def finish(self) -> Chunks:
        """The last row, or the count of its tokens when it is under `min_tokens` (dropped)."""
        self.closed = True
        tail = self._pending.shape[0]
        if tail and tail >= self._layout.min_tokens:
            rows, lengths = _rows_from_bounds(self._pending, [(self._start, self._start + tail)], self._start,
                                              self._layout, self._dtype)
            return self._emit(rows, lengths)
        return Chunks(rows=np.zeros((0, self._layout.seq_len), dtype=self._dtype), lengths=np.zeros(0, np.int32),
                      dropped_tokens=tail)
