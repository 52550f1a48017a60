"""Read one work unit in two streaming passes, so a worker's memory does not grow with its size.

The first pass (`UnitReader.scan`) measures the clean text: content keys, counts, script letters,
and every reason to skip the whole input (binary, HTML, truncated compression, no text), before a
row is written. The second (`UnitReader.documents`) hands out each document's clean text in pieces
for tokenizing, since the rows' keys and seeds need the document's content key from the first
pass. A unit whose clean text fits in CACHE_CHARS is kept from the first pass and not read again;
a larger one is streamed twice (compressed ones too: they are decompressed again).

The unit's format (`formats.registry`) says whether it is one text document or records, and which
reader reads the records; this module runs the passes over either, on the bytes that `raw_blocks`
gives (decompressed, or a line range's whole lines).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.byte_ranges import READ_BLOCK_BYTES, line_blocks
from pipeline.beam.reading.compression import (
    COMPRESSED_BLOCK_BYTES,
    SNIFF_BYTES,
    UNREADABLE,
    decompressed,
    is_compressed,
    output_bound,
    sniffed_suffix,
)
from pipeline.beam.reading.formats.jsonl import MAX_LINE_BYTES
from pipeline.beam.reading.formats.registry import input_format
from pipeline.beam.reading.formats.text import scan_text_input
from pipeline.beam.reading.work_units import WorkUnit
from pipeline.kernels.common.hashing import content_digest
from pipeline.kernels.text.cleaning import NotText, clean_text
from pipeline.kernels.text.quality import script_letter_counts
from pipeline.kernels.text.text_stream import (
    PIECE_BYTES,
    ByteRange,
    RawTextStats,
    clean_pieces,
    decoded_pieces,
)

__all__ = ["UnitReader", "UnitScan", "ReadSizes", "raw_blocks", "input_changed", "CACHE_CHARS"]

CACHE_CHARS = 32 << 20
CHANGED = "unreadable: changed while being read"
SKIP_NO_DOCUMENTS = "empty: no documents"


@dataclass(frozen=True)
class ReadSizes:
    """The sizes reading works in (defaults for real inputs; tests pass small ones to hit every
    boundary with small inputs). Output never depends on them."""

    read_bytes: int = READ_BLOCK_BYTES  # bytes per read call
    compressed_block_bytes: int = COMPRESSED_BLOCK_BYTES  # compressed bytes per decompress call
    piece_bytes: int = PIECE_BYTES  # text handed to cleaning and tokenizing at a time
    max_line_bytes: int = MAX_LINE_BYTES  # a longer .jsonl line is a skipped record
    max_output: int | None = None  # a compressed input's output bound (None: `output_bound` of its size)


def _check_regular(path: str) -> None:
    """A local FIFO, socket or device would block or never end: refuse it before opening."""
    if "://" not in path and os.path.exists(path) and not os.path.isdir(path) \
            and not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"not a regular file (FIFO, socket or device): {path}")


def _open(path: str):
    _check_regular(path)
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def input_changed(unit: WorkUnit) -> str | None:
    """Why a file is not the one listed (its size or modification time differ, or it is gone), or
    None; asked after every read of it. A file read twice (two passes, or a scan and its input splits)
    must be the same both times, else its rows would carry the first version's content key; a file
    read once must be the one listed, else its tokens are those of more (or fewer) bytes than the
    manifest records."""
    if not input_format(unit.format).from_file or unit.refused:
        return None
    path = unit.file
    try:
        if "://" not in path:
            info = os.stat(path)
            size, modified = info.st_size, info.st_mtime
        else:
            meta = FileSystems.match([path])[0].metadata_list
            if not meta:
                raise FileNotFoundError(path)
            size, modified = meta[0].size_in_bytes, float(meta[0].last_updated_in_seconds or 0.0)
    except (OSError, ValueError) as error:
        return f"{CHANGED}: {type(error).__name__}: {error}"
    listed = unit.size if not unit.path else None  # a byte range's size is the range's
    if listed is not None and size != listed:
        change = f"{'grew' if size > listed else 'shrank'} from {listed:,} to {size:,} bytes"
    elif unit.modified and modified != unit.modified:
        change = f"modified at {modified:.3f}, listed as modified at {unit.modified:.3f}"
    else:
        return None
    return f"{CHANGED}: {change} since it was listed"


def raw_blocks(unit: WorkUnit, sizes: ReadSizes = ReadSizes()) -> Iterator[bytes]:
    """The unit's bytes, decompressed, in blocks (a byte range of a large file: its whole lines). The
    compression is the name's suffix, else the signature its first bytes carry (see `sniffed_suffix`)."""
    with _open(unit.file) as handle:
        if unit.path:
            yield from line_blocks(handle, unit.start, unit.stop, sizes.read_bytes)
            return
        blocks = iter(lambda: handle.read(sizes.read_bytes), b"")
        name = unit.source
        if not is_compressed(name):
            head = b""
            for block in blocks:
                head += block
                if len(head) >= SNIFF_BYTES:
                    break
            name += sniffed_suffix(head)
            blocks = itertools.chain([head] if head else [], blocks)
        max_output = sizes.max_output if sizes.max_output is not None else output_bound(unit.size)
        yield from decompressed(name, blocks, max_output=max_output if is_compressed(name) else None,
                                block_bytes=sizes.compressed_block_bytes)


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
    splits: list[ByteRange] = field(default_factory=list)  # an input marked for splitting: its input splits
    missing_field: str = ""  # records only: why no record had the text column (the fields found)

    def skip_record(self, reason: str) -> None:
        self.records_skipped[reason] = self.records_skipped.get(reason, 0) + 1


def _no_usable_records(scan: UnitScan) -> str:
    reasons = ", ".join(f"{n:,} {reason}" for reason, n in sorted(scan.records_skipped.items()))
    if scan.missing_field and len(scan.records_skipped) == 1:
        return f"no usable records: {scan.missing_field}"
    return f"no usable records ({reasons})"


class UnitReader:
    """Reads one unit as clean documents, in two passes (see the module docstring).

    `scan()` first; then `documents()` yields (content digest, iterator of clean text pieces) per
    document, in order. Bad content is never raised: `scan()` returns the reason. A record format's
    reader reads the unit through this object (a `formats.source.RecordSource`)."""

    def __init__(self, unit: WorkUnit, text_column: str, keep_boilerplate: bool,
                 piece_bytes: int | None = None, split_bytes: int = 0, sizes: ReadSizes | None = None) -> None:
        self.unit = unit
        self._text_column = text_column
        self._keep_boilerplate = keep_boilerplate
        self._split_bytes = split_bytes
        self.sizes = sizes or ReadSizes()
        self.format = input_format(unit.format)
        self.piece_bytes = min(piece_bytes or self.sizes.piece_bytes, split_bytes or PIECE_BYTES)
        self._cache: list[str] | None = None
        self.scanned: UnitScan | None = None

    @property
    def max_line_bytes(self) -> int:
        return self.sizes.max_line_bytes

    def open_file(self) -> BinaryIO:
        return _open(self.unit.file)

    def decoded_lines(self, stats: RawTextStats, on_long_line: Callable[[int], None]) -> Iterator[str]:
        return self._decoded(stats, at_spaces=False, records=True, on_long_line=on_long_line)

    def scan(self) -> UnitScan:
        out = UnitScan()
        self.scanned = out
        try:
            if self.unit.refused:
                raise NotText(self.unit.refused)
            if self.format.records:
                self._scan_records(out)
            else:
                self._scan_text(out)
        except NotText as reason:  # the whole input is skipped: nothing of it is counted
            out = self.scanned = UnitScan(skip_reason=str(reason))
        except UNREADABLE as error:
            # Unreadable, truncated compression, corrupt parquet: skipped with the reason.
            out = self.scanned = UnitScan(skip_reason=f"unreadable: {type(error).__name__}: {error}")
        if out.skip_reason is None and not out.documents:
            out.skip_reason = SKIP_NO_DOCUMENTS if not out.records_skipped else _no_usable_records(out)
        if out.skip_reason is not None:
            self._cache = None
        return out

    def _decoded(self, stats: RawTextStats, at_spaces: bool = True, records: bool = False,
                 on_long_line: Callable[[int], None] | None = None) -> Iterator[str]:
        return decoded_pieces(raw_blocks(self.unit, self.sizes), stats, self.piece_bytes, at_spaces,
                              at_start=not (self.unit.path and self.unit.start > 0),
                              nul_is_binary=not records,
                              max_line_bytes=self.sizes.max_line_bytes if records else 0, on_long_line=on_long_line,
                              html_is_page=not records)

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
        # An input marked for splitting is read again by its input splits: keeping its pieces would be waste.
        pieces = self._decoded(stats) if self._split_bytes else self._caching(self._decoded(stats))
        scan = scan_text_input(pieces, stats, self.unit.size, is_compressed(self.unit.source),
                               self._keep_boilerplate, split_bytes=self._split_bytes)
        out.documents = 1
        out.characters = scan.measure.chars
        out.joined_bytes = scan.measure.utf8_bytes
        out.letters = scan.measure.letters
        out.key = scan.measure.digest
        out.replaced_bytes = scan.replaced_bytes
        out.boilerplate_chars_removed = scan.boilerplate_chars_removed
        out.strip = scan.strip
        out.signature = scan.measure.signature()
        out.splits = scan.ranges

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
        if not self.format.records:
            pieces = iter(self._cache) if self._cache is not None else self._decoded(RawTextStats())
            yield scan.key, clean_pieces(pieces, scan.strip)
            return
        texts = iter(self._cache) if self._cache is not None else self._records(None)
        for text in texts:
            yield content_digest(text), iter((text,))

    def _records(self, out: UnitScan | None) -> Iterator[str]:
        """The clean text of each usable record; `out` (first pass only) counts the skipped ones."""
        skip = out.skip_record if out is not None else (lambda reason: None)
        for value in self.format.read(self, self._text_column, skip, out):
            if not isinstance(value, str):
                skip(f"text column is {type(value).__name__}, not a string")
                continue
            try:
                yield clean_text(value, keep_boilerplate=True).text
            except NotText as reason:
                skip(str(reason))
