"""Tokenize documents in paragraph pieces: blank lines split paragraphs, long paragraphs are cut at
whitespace, and pieces are encoded in batches of about a megabyte of text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np
from tokenizers import Tokenizer

from pipeline.kernels.sentences import split_sentences
from pipeline.kernels.wordpiece import longest_run_without
from pipeline.tokenizer.fast import FastTokenizer

AnyTokenizer = Tokenizer | FastTokenizer

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
# Paragraph pieces longer than this are split at whitespace so no call gets a giant string.
MAX_PIECE_CHARS = 20_000
ENCODE_BATCH = 2048
ENCODE_CHARS = 1 << 20
FAST_SLICE_BYTES = 4 << 20  # the fast tokenizer's output buffer is a few times its input: bound it


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


def _encode_each(tokenizer: AnyTokenizer, texts: list[str]) -> list[np.ndarray]:
    if isinstance(tokenizer, FastTokenizer):
        return tokenizer.encode_many(texts)
    return [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


def tokenize_sentences(tokenizer: AnyTokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Content ids of one document and the token count of each sentence (int32 arrays)."""
    ids: list[np.ndarray] = []
    lengths: list[int] = []
    sentences = (s for paragraph in iter_paragraphs(text) for s in split_sentences(paragraph))
    for batch in _batches(sentences):
        encoded = _encode_each(tokenizer, batch)
        lengths.extend(e.shape[0] for e in encoded)
        ids.append(np.concatenate(encoded) if encoded else np.zeros(0, dtype=np.int32))
    if not ids:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    return np.concatenate(ids), np.asarray(lengths, dtype=np.int32)


def _fast_slices(data: bytes) -> Iterator[bytes]:
    """`data` in slices of about FAST_SLICE_BYTES, each cut just after a space or newline."""
    start = 0
    while len(data) - start > FAST_SLICE_BYTES:
        cut = max(data.rfind(b" ", start, start + FAST_SLICE_BYTES), data.rfind(b"\n", start, start + FAST_SLICE_BYTES))
        cut = cut + 1 if cut > start else start + FAST_SLICE_BYTES  # never without one: see tokenize_text
        yield data[start:cut]
        start = cut
    yield data[start:]


def tokenize_text(tokenizer: AnyTokenizer, text: str) -> np.ndarray:
    """Content ids of one document (no specials), int32, shape (n,), tokenized in batches of pieces.

    Paragraph pieces start and end at split points, so their ids are those of the whole text,
    except where a piece had to be cut inside a run of MAX_PIECE_CHARS without a space or newline.
    The fast tokenizer therefore takes a document without such a run in large slices cut at
    spaces and newlines, with no paragraph splitting at all, and a document with one as pieces
    joined by a space (the same ids as encoding the pieces one by one)."""
    if isinstance(tokenizer, FastTokenizer):
        data = text.encode("utf-8", "surrogatepass")
        if longest_run_without(np.frombuffer(data, dtype=np.uint8), b" \n") < MAX_PIECE_CHARS - 1:
            parts = [tokenizer.encode_bytes(piece) for piece in _fast_slices(data)]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    parts: list[np.ndarray] = []
    for batch in _batches(iter_paragraphs(text)):
        if isinstance(tokenizer, FastTokenizer):
            parts.append(tokenizer.encode(" ".join(batch)))
            continue
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        parts.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32))
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate(parts)
