"""Read one work unit in two streaming passes, so a worker's memory does not grow with its size.

The first pass (`UnitReader.scan`) measures the clean text: content keys, counts, script letters,
and every reason to skip the whole input (binary, HTML, truncated compression, no text), before a
row is written. The second (`UnitReader.documents`) reads the input again and hands out each
document's clean text in pieces for tokenizing, since the rows' keys and seeds need the document's
content key from the first pass. A unit whose clean text fits in CACHE_CHARS is read once and kept
between the passes; a larger one (or any compressed one, whose size is unknown) is streamed twice.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import lzma
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.readers import (
    COMPRESSED_SUFFIXES,
    FORMAT_HF,
    FORMAT_JSONL,
    FORMAT_PARQUET,
    WorkUnit,
    load_hf_dataset,
)
from pipeline.kernels.cleaning import SKIP_EMPTY, NotText, clean_text
from pipeline.kernels.hashing import content_digest
from pipeline.kernels.quality import script_letter_counts
from pipeline.kernels.text_stream import (
    PIECE_BYTES,
    ByteRange,
    RawTextStats,
    clean_pieces,
    decoded_pieces,
    scan_text,
)

READ_BLOCK_BYTES = 4 << 20
COMPRESSED_BLOCK_BYTES = 1 << 16  # compressed input fed per call, so one call's output stays small
CACHE_CHARS = 32 << 20
SIGNATURE_SEED = 0x4D696E48  # fixed: near-duplicate pairs do not depend on --seed
# A compressed text input's MinHash table is sized for this many times its size (its text's size is
# unknown until it has been read; the table's size only has to be the same in every run).
COMPRESSED_TEXT_RATIO = 4
PARQUET_BATCH_ROWS = 4096
UNREADABLE = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


def _check_regular(path: str) -> None:
    """A local FIFO, socket or device would block or never end: refuse it before opening."""
    if "://" not in path and os.path.exists(path) and not os.path.isdir(path) \
            and not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"not a regular file (FIFO, socket or device): {path}")


def _open(path: str):
    _check_regular(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _range_blocks(handle, start: int, stop: int) -> Iterator[bytes]:
    """The bytes of the whole lines whose first byte lies in [start, stop), in blocks."""
    position = 0
    if start > 0:
        handle.seek(start - 1)  # the line holding byte start-1 belongs to the previous range
        position = start - 1
        while True:
            block = handle.read(READ_BLOCK_BYTES)
            if not block:
                return
            newline = block.find(b"\n")
            if newline >= 0:
                position += newline + 1
                block = block[newline + 1:]
                break
            position += len(block)
    else:
        block = handle.read(READ_BLOCK_BYTES)
    if position >= stop:
        return
    while block:
        newline = block.find(b"\n", max(0, stop - 1 - position))  # the range's last line ends here
        if newline >= 0:
            yield block[: newline + 1]
            return
        yield block
        position += len(block)
        block = handle.read(READ_BLOCK_BYTES)


def _new_decompressor(name: str):
    if name.endswith(".gz"):
        return zlib.decompressobj(wbits=31)
    if name.endswith(".deflate"):
        return zlib.decompressobj()
    if name.endswith(".bz2"):
        return bz2.BZ2Decompressor()
    if name.endswith((".xz", ".lzma")):
        return lzma.LZMADecompressor()
    if name.endswith((".zst", ".zstd")):
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj()
    return None


def _decompressed(name: str, blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Decompress a stream by the file's suffix. Concatenated members (gzip, bzip2, xz) and frames
    (zstd) are all read; a stream that ends before its end marker raises EOFError, unlike Beam's
    readers, which return the part they could read."""
    decompressor = _new_decompressor(name.lower())
    if decompressor is None:
        yield from blocks
        return
    single_stream = name.lower().endswith(".deflate")
    for block in blocks:
        for start in range(0, len(block), COMPRESSED_BLOCK_BYTES):
            data = block[start: start + COMPRESSED_BLOCK_BYTES]
            while data:
                try:
                    out = decompressor.decompress(data)
                except Exception as error:  # zstd raises its own error type: report it as corrupt
                    if isinstance(error, UNREADABLE):
                        raise
                    raise ValueError(f"corrupt compressed stream: {error}") from None
                if out:
                    yield out
                if not decompressor.eof:
                    break
                data = decompressor.unused_data
                if single_stream or not data.strip(b"\x00"):
                    data = b""  # trailing zero padding after the last gzip member is allowed
                    if single_stream:
                        break
                else:
                    decompressor = _new_decompressor(name.lower())
    if not decompressor.eof:
        raise EOFError("compressed stream ended before its end-of-stream marker (truncated)")


def raw_blocks(unit: WorkUnit) -> Iterator[bytes]:
    """The unit's bytes, decompressed, in blocks (a byte range of a large file: its whole lines)."""
    with _open(unit.path or unit.source) as handle:
        if unit.path:
            yield from _range_blocks(handle, unit.start, unit.stop)
        else:
            yield from _decompressed(unit.source, iter(lambda: handle.read(READ_BLOCK_BYTES), b""))


@dataclass
class UnitScan:
    """The first pass over a unit: everything its result needs before any row is written."""

    skip_reason: str | None = None
    documents: int = 0
    characters: int = 0
    joined_bytes: int = 0  # UTF-8 bytes of the documents joined by newlines (what the MinHash reads)
    letters: np.ndarray | None = None
    key: str = ""  # the unit's content key
    replaced_bytes: int = 0
    boilerplate_chars_removed: int = 0
    records_skipped: dict[str, int] = field(default_factory=dict)
    strip: bool = False
    signature: np.ndarray | None = None  # text inputs: the MinHash signature, from this pass
    ranges: list[ByteRange] = field(default_factory=list)  # a split text input: its byte ranges

    def skip_record(self, reason: str) -> None:
        self.records_skipped[reason] = self.records_skipped.get(reason, 0) + 1


class UnitReader:
    """Reads one unit as clean documents, in two passes (see the module docstring).

    `scan()` first; then `documents()` yields (content digest, iterator of clean text pieces) per
    document, in order. Bad content is never raised: `scan()` returns the reason."""

    def __init__(self, unit: WorkUnit, text_column: str, keep_boilerplate: bool,
                 piece_bytes: int | None = None, split_bytes: int = 0) -> None:
        self.unit = unit
        self._text_column = text_column
        self._keep_boilerplate = keep_boilerplate
        self._split_bytes = split_bytes
        self.piece_bytes = min(piece_bytes or PIECE_BYTES, split_bytes or PIECE_BYTES)
        self._cache: list[str] | None = None
        self.scanned: UnitScan | None = None

    @property
    def _is_text(self) -> bool:
        return self.unit.format not in (FORMAT_JSONL, FORMAT_PARQUET, FORMAT_HF)

    def scan(self) -> UnitScan:
        out = UnitScan()
        self.scanned = out
        try:
            if self._is_text:
                self._scan_text(out)
            else:
                self._scan_records(out)
        except NotText as reason:  # the whole input is skipped: nothing of it is counted
            out = self.scanned = UnitScan(skip_reason=str(reason))
        except UNREADABLE as error:
            # Unreadable, a directory, truncated compression, corrupt parquet: skipped with the reason.
            out = self.scanned = UnitScan(skip_reason=f"unreadable: {type(error).__name__}: {error}")
        if out.skip_reason is None and not out.documents:
            out.skip_reason = "empty: no documents" if not out.records_skipped else "no usable records"
        if out.skip_reason is not None:
            self._cache = None
        return out

    def _decoded(self, stats: RawTextStats, at_spaces: bool = True) -> Iterator[str]:
        return decoded_pieces(raw_blocks(self.unit), stats, self.piece_bytes, at_spaces)

    def _caching(self, pieces: Iterator[str]) -> Iterator[str]:
        """Pass the pieces through, keeping them while their total stays under CACHE_CHARS."""
        cache: list[str] | None = []
        size = 0
        for piece in pieces:
            if cache is not None:
                size += len(piece)
                if size <= CACHE_CHARS:
                    cache.append(piece)
                else:
                    cache = None
            yield piece
        self._cache = cache

    def _scan_text(self, out: UnitScan) -> None:
        stats = RawTextStats()
        compressed = self.unit.source.lower().endswith(COMPRESSED_SUFFIXES)
        # An input marked for splitting is read again by its ranges: keeping its pieces would be waste.
        pieces = self._decoded(stats) if self._split_bytes else self._caching(self._decoded(stats))
        scan = scan_text(pieces, stats, self._keep_boilerplate,
                         signature_bytes=self.unit.size * (COMPRESSED_TEXT_RATIO if compressed else 1),
                         signature_seed=SIGNATURE_SEED, split_bytes=self._split_bytes)
        out.documents = 1
        out.characters = scan.measure.chars
        out.joined_bytes = scan.measure.utf8_bytes
        out.letters = scan.measure.letters
        out.key = scan.measure.digest
        out.replaced_bytes = scan.replaced_bytes
        out.boilerplate_chars_removed = scan.boilerplate_chars_removed
        out.strip = scan.strip
        out.signature = scan.measure.signature()
        out.ranges = scan.ranges

    def _scan_records(self, out: UnitScan) -> None:
        keys = hashlib.sha256()
        first = ""
        for text in self._caching(self._records(out)):
            digest = content_digest(text)
            first = first or digest
            keys.update(digest.encode())
            data = text.encode("utf-8", "surrogatepass")
            out.documents += 1
            out.characters += len(text)
            out.joined_bytes += len(data) + (out.documents > 1)
            out.letters = script_letter_counts(data, out.letters)
        out.key = first if out.documents == 1 else keys.hexdigest()

    def documents(self) -> Iterator[tuple[str, Iterator[str]]]:
        """The second pass: (content digest, clean text pieces) of each document."""
        scan = self.scanned
        if scan is None or scan.skip_reason is not None:
            raise RuntimeError("documents() needs a successful scan() first")
        if self._is_text:
            pieces = iter(self._cache) if self._cache is not None else self._decoded(RawTextStats())
            yield scan.key, clean_pieces(pieces, scan.strip)
            return
        texts = iter(self._cache) if self._cache is not None else self._records(None)
        for text in texts:
            yield content_digest(text), iter((text,))

    def _records(self, out: UnitScan | None) -> Iterator[str]:
        """The clean text of each usable record; `out` (first pass only) counts the skipped ones."""
        skip = out.skip_record if out is not None else (lambda reason: None)
        for value in self._record_values(out):
            if not isinstance(value, str):
                skip(f"text column is {type(value).__name__}, not a string")
                continue
            try:
                yield clean_text(value, keep_boilerplate=True).text
            except NotText as reason:
                skip(str(reason))

    def _record_values(self, out: UnitScan | None) -> Iterator[object]:
        unit, column = self.unit, self._text_column
        skip = out.skip_record if out is not None else (lambda reason: None)
        if unit.format == FORMAT_HF:
            dataset = load_hf_dataset(unit.hf_name, unit.hf_split, unit.revision)
            yield from dataset.select(range(unit.start, unit.stop))[column]
        elif unit.format == FORMAT_PARQUET:
            import pyarrow.parquet as pq

            with _open(unit.source) as handle:
                parquet = pq.ParquetFile(handle)
                if column not in parquet.schema_arrow.names:
                    raise NotText(f"parquet file has no column {column!r} (columns: {parquet.schema_arrow.names})")
                for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[column]):
                    yield from batch.column(0).to_pylist()
        else:
            yield from self._jsonl_values(column, skip, out)

    def _jsonl_values(self, column: str, skip, out: UnitScan | None) -> Iterator[object]:
        stats = RawTextStats()
        has_text = False
        for piece in self._decoded(stats, at_spaces=False):
            has_text = has_text or not (piece == "" or piece.isspace())
            for line in piece.split("\n"):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    skip("line is not valid JSON")
                    continue
                if not isinstance(record, dict) or column not in record:
                    skip(f"record has no {column!r} field")
                    continue
                yield record[column]
        if out is not None:
            stats.check()
            if not has_text:
                raise NotText(SKIP_EMPTY)
            out.replaced_bytes = stats.replaced
