"""Byte ranges of one file, read two ways:

* a line range (`line_blocks`): the whole lines whose first byte lies in [start, stop). A large
  uncompressed `.jsonl` file is cut into line ranges when it is listed, one work unit each
  (`WorkUnit.path`, `start`, `stop`; its source is `line_range_source`);
* exact bytes (`exact_blocks`, and `blocks_after` to the file's end): bytes [start, stop) as they
  are, which an input split of a large text file reads (`pipeline.beam.input_splits`: the worker
  that scans the file cuts it at piece boundaries).

Either way a range is a part of one input, never an input of its own: its results carry the file
(`UnitResult.file`), and deduplication groups by it.
"""

from __future__ import annotations

from collections.abc import Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.kernels.text.cleaning import UTF16_BOMS

READ_BLOCK_BYTES = 4 << 20
_RANGE_MARK = "@"


def line_range_source(path: str, start: int, stop: int) -> str:
    """The source name of the line range [start, stop) of `path`."""
    return f"{path}{_RANGE_MARK}{start}-{stop}"


def line_blocks(handle, start: int, stop: int, block_bytes: int = 0) -> Iterator[bytes]:
    """The bytes of the whole lines whose first byte lies in [start, stop) of an open file, in
    blocks of about `block_bytes` (a line is never split between two ranges: the range that holds
    its first byte reads it to its newline, however far past `stop`)."""
    block_bytes = block_bytes or READ_BLOCK_BYTES
    position = 0
    block = b""
    if start > 0:
        handle.seek(start - 1)  # the line holding byte start-1 belongs to the previous range
        position = start - 1
        while True:
            block = handle.read(block_bytes)
            if not block:
                return
            newline = block.find(b"\n")
            if newline >= 0:
                position += newline + 1
                block = block[newline + 1:]
                break
            position += len(block)
        if not block:  # that line's newline was the last byte read: this range starts a new block
            block = handle.read(block_bytes)
    else:
        block = handle.read(block_bytes)
    if position >= stop:
        return
    while block:
        newline = block.find(b"\n", max(0, stop - 1 - position))  # the range's last line ends here
        if newline >= 0:
            yield block[: newline + 1]
            return
        yield block
        position += len(block)
        block = handle.read(block_bytes)


def exact_blocks(path: str, start: int, stop: int, block_bytes: int = 0) -> Iterator[bytes]:
    """The bytes [start, stop) of a file, which must still hold them.

    Raises:
        EOFError: the file is shorter than `stop` (it changed since it was scanned).
    """
    block_bytes = block_bytes or READ_BLOCK_BYTES
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.seek(start)
        position = start
        while position < stop:
            block = handle.read(min(block_bytes, stop - position))
            if not block:
                raise EOFError(f"{path} ended at byte {position}, before {stop}: changed while being read")
            position += len(block)
            yield block


def blocks_after(path: str, start: int, block_bytes: int = 0) -> Iterator[bytes]:
    """The bytes of a file from `start` to its end (what follows an input split, read as its lookahead)."""
    block_bytes = block_bytes or READ_BLOCK_BYTES
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.seek(start)
        while True:
            block = handle.read(block_bytes)
            if not block:
                return
            yield block


def starts_utf16(path: str) -> bool:
    """Whether a file starts with a UTF-16 byte order mark: its newlines are two bytes, so it is
    never cut into byte ranges (False when it cannot be read: reading it reports why)."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read(2).startswith(UTF16_BOMS)
    except Exception:  # noqa: BLE001 - any listing-time read error: the reader reports it with its reason
        return False
