"""Streaming kernels give exactly what their whole-input counterparts give: clean text, MinHash
signatures, rows."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.kernels.common.hashing import content_digest, short_row_targets
from pipeline.kernels.rows.chunking import RowLayout, RowStream, chunk_tokens, pack_sentences
from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.kernels.text.quality import MinHasher, minhash_signature
from pipeline.kernels.text.text_stream import (
    RawTextStats,
    TextMeasure,
    clean_pieces,
    cut_pieces,
    decoded_pieces,
    scan_text,
)
from tests.conftest import BOOKS

ATOMS = [b"word ", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\n  \n  ", b"*** START OF THE BOOK ***\n",
         b"*** END OF THE BOOK ***\n", b"  *** START OF X\n", "\u00e9".encode(), "\u65e5\u672c".encode(), b"\xff",
         b"\xe2\x82", b"\t", b"\x0c", b"longwordwithoutspace" * 5, b"\r", b"\n*** END OF IT\r", b"\x00"]


def _stream_clean(data: bytes, keep_boilerplate: bool, piece: int, block: int):
    """(text, replaced, boilerplate removed, digest, chars, UTF-8 bytes, letters, signature) by the
    two streaming passes, or the NotText reason."""
    blocks = [data[i:i + block] for i in range(0, len(data), block)]
    stats = RawTextStats()
    try:
        scan = scan_text(decoded_pieces(iter(blocks), stats, piece), stats, keep_boilerplate, signature_bytes=len(data))
    except NotText as reason:
        return str(reason)
    text = "".join(clean_pieces(decoded_pieces(iter(blocks), RawTextStats(), piece), scan.strip))
    measure = scan.measure
    return (text, scan.replaced_bytes, scan.boilerplate_chars_removed, measure.digest, measure.chars,
            measure.utf8_bytes, measure.letters.tolist(), measure.signature().tolist())


def _whole_clean(data: bytes, keep_boilerplate: bool):
    try:
        clean = clean_bytes(data, keep_boilerplate=keep_boilerplate)
    except NotText as reason:
        return str(reason)
    measure = TextMeasure(signature_bytes=len(data))
    measure.add(clean.text)
    return (clean.text, clean.replaced_bytes, clean.boilerplate_chars_removed, content_digest(clean.text),
            len(clean.text), len(clean.text.encode("utf-8", "surrogatepass")), measure.letters.tolist(),
            measure.signature().tolist())


def test_streamed_cleaning_equals_whole_input_cleaning_on_hostile_mixes():
    """Random mixes of CRLF, lone CR, BOMs, UTF-16, invalid and split UTF-8, NUL, control bytes and
    Gutenberg markers, cut into pieces and read in blocks of every size: the same text, counts,
    digest, letters, signature and skip reason as measuring the whole clean text, whenever no line is
    longer than a piece (the first pass hashes the pieces' own bytes where it can)."""
    rng = random.Random(7)
    checked = 0
    for _ in range(700):
        data = b"".join(rng.choice(ATOMS[:-1] if rng.random() < 0.9 else ATOMS) for _ in range(rng.randint(0, 150)))
        if rng.random() < 0.1:
            data = b"\xef\xbb\xbf" + data
        if rng.random() < 0.1:
            data = b"\xff\xfe" + data.decode("utf-8", "replace").encode("utf-16-le")
        piece = rng.choice([100, 400, 1000])
        lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if max(len(line) for line in lines) * 2 + 8 >= piece:
            continue  # a line longer than a piece may be cut inside a marker line: documented
        keep = rng.random() < 0.3
        assert _stream_clean(data, keep, piece, rng.choice([1, 7, 64, 10**6])) == _whole_clean(data, keep), data
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("name", sorted(p.name for p in BOOKS.glob("*.txt"))[:8])
def test_streamed_cleaning_equals_whole_on_books(name):
    data = (BOOKS / name).read_bytes()
    for keep in (False, True):
        assert _stream_clean(data, keep, 4096, 1000) == _whole_clean(data, keep)


def test_pieces_end_at_safe_points():
    text = ("Paragraph one has words.\n\n  Second paragraph \u00e9\u00e9 with more words\r\nand a line.\n" * 300).encode()
    pieces = list(cut_pieces([text[i:i + 333] for i in range(0, len(text), 333)], piece_bytes=1000))
    assert b"".join(pieces) == text and len(pieces) > 10
    for piece in pieces[:-1]:
        assert piece.endswith((b"\n", b" ")) and not piece.endswith(b"\r")
        piece.decode("utf-8")  # never inside a character
    # no newline and no space at all: cut at a character boundary, never between CR and LF
    run = ("\u00e9" * 3000).encode()
    for piece in cut_pieces([run], piece_bytes=1001):
        piece.decode("utf-8")
    # a JSON line is never cut: without a newline a piece grows to the whole line
    line = b'{"text": "' + b"x " * 5000 + b'"}\n'
    assert list(cut_pieces([line * 3], piece_bytes=100, at_spaces=False)) == [line] * 3


def test_minhash_in_pieces_equals_whole():
    data = (BOOKS / sorted(p.name for p in BOOKS.glob("*.txt"))[0]).read_bytes()
    rng = random.Random(3)
    hasher = MinHasher(len(data), seed=11)
    position = 0
    while position < len(data):
        step = rng.randint(1, 5000)
        hasher.update(data[position:position + step])
        position += step
    assert np.array_equal(hasher.signature(), minhash_signature(data, seed=11))
    assert np.array_equal(MinHasher(0).signature(), minhash_signature(b""))


def test_row_stream_equals_whole_document_chunking():
    rng = np.random.default_rng(0)
    for _ in range(200):
        seq_len = int(rng.choice([8, 16, 64]))
        layout = RowLayout(seq_len=seq_len, cls_id=1, sep_id=2, pad_id=0, min_tokens=int(rng.integers(0, seq_len - 2)))
        lengths = rng.integers(0, 3 * seq_len, int(rng.integers(0, 60))).astype(np.int32)
        tokens = rng.integers(5, 1000, int(lengths.sum())).astype(np.int32)
        key, probability = np.uint64(rng.integers(0, 2**63)), float(rng.choice([0.0, 0.1, 0.5]))
        targets = short_row_targets(key, len(lengths) + len(tokens) // (seq_len - 2) + 2, probability, seq_len - 2)
        for sentences in (True, False):
            want = (pack_sentences(tokens, lengths, layout, np.int32, targets) if sentences
                    else chunk_tokens(tokens, layout, np.int32))
            stream = RowStream(layout, np.int32, sentences=sentences, short_targets=(
                (lambda n, key=key, p=probability, w=seq_len - 2: short_row_targets(key, n, p, w)) if probability
                else None))
            rows, i, position = [], 0, 0
            while i < len(lengths):
                k = int(rng.integers(1, 5))
                part = lengths[i:i + k]
                rows.append(stream.add(tokens[position:position + int(part.sum())], part if sentences else None).rows)
                i, position = i + k, position + int(part.sum())
            last = stream.finish()
            rows.append(last.rows)
            got = np.concatenate(rows)
            assert got.shape == want.rows.shape and np.array_equal(got, want.rows)
            assert last.dropped_tokens == want.dropped_tokens and stream.tokens == len(tokens)


def test_a_gutenberg_marker_split_across_pieces_is_found_and_a_mid_line_one_is_not():
    """A line longer than a piece is cut at spaces: a START line cut in two was missed (the book
    kept its header), and a piece starting at `*** START OF` inside a line was taken for a marker."""
    from pipeline.kernels.text.cleaning import strip_gutenberg
    from pipeline.kernels.text.text_stream import GutenbergStripper

    text = ("Header words of the licence.\n*** START OF THE PROJECT GUTENBERG EBOOK TEA ***\nThe body, "
            "line one.\nA line that quotes *** START OF THE PROJECT GUTENBERG EBOOK X *** inside it.\n"
            "*** END OF THE PROJECT GUTENBERG EBOOK TEA ***\nLicence after.\n")
    want = strip_gutenberg(text)[0]
    for size in range(1, 40):
        stripper = GutenbergStripper()
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        got = "".join(part for piece in pieces for part in stripper.feed(piece)) + "".join(stripper.feed("", True))
        assert got == want, size
