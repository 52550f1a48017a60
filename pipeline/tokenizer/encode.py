"""Tokenize documents in paragraph pieces: blank lines split paragraphs, long paragraphs are cut at
whitespace, and pieces are encoded in batches of about a megabyte of text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np
from tokenizers import Tokenizer

from pipeline.kernels.sentences import split_sentences

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
# Paragraph pieces longer than this are split at whitespace so no call gets a giant string.
MAX_PIECE_CHARS = 20_000
ENCODE_BATCH = 2048
ENCODE_CHARS = 1 << 20


def _split_long(piece: str) -> Iterator[str]:
    """Cut a paragraph longer than MAX_PIECE_CHARS at whitespace (hard cut if there is none)."""
    start = 0
    while len(piece) - start > MAX_PIECE_CHARS:
        cut = piece.rfind(" ", start + 1, start + MAX_PIECE_CHARS)
        if cut <= start:
            newline = piece.rfind("\n", start + 1, start + MAX_PIECE_CHARS)
            cut = newline if newline > start else start + MAX_PIECE_CHARS
        yield piece[start:cut]
        start = cut
    yield piece[start:] if start else piece


def iter_paragraphs(text: str) -> Iterator[str]:
    """Paragraph-sized pieces, lazily: split at blank lines, long paragraphs split again at whitespace."""
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        if text[start : match.start()].strip():
            yield from _split_long(text[start : match.start()])
        start = match.end()
    if text[start:].strip():
        yield from _split_long(text[start:])


def _batches(pieces: Iterator[str]) -> Iterator[list[str]]:
    """Groups of pieces of at most ENCODE_BATCH pieces and ENCODE_CHARS characters: one encode call
    never holds the Encoding objects of more than about a megabyte of text."""
    batch: list[str] = []
    chars = 0
    for piece in pieces:
        batch.append(piece)
        chars += len(piece)
        if len(batch) >= ENCODE_BATCH or chars >= ENCODE_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def tokenize_sentences(tokenizer: Tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Content ids of one document and the token count of each sentence (int32 arrays)."""
    ids: list[np.ndarray] = []
    lengths: list[int] = []
    sentences = (s for paragraph in iter_paragraphs(text) for s in split_sentences(paragraph))
    for batch in _batches(sentences):
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        lengths.extend(len(e.ids) for e in encodings)
        ids.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32))
    if not ids:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    return np.concatenate(ids), np.asarray(lengths, dtype=np.int32)


def tokenize_text(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """Content ids of one document (no specials), int32, shape (n,), tokenized in batches of pieces."""
    parts: list[np.ndarray] = []
    for batch in _batches(iter_paragraphs(text)):
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        parts.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32))
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate(parts)
