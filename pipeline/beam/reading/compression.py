"""Decompress an input's byte stream by its file's suffix, in bounded memory.

Every member (gzip, bzip2, xz) and frame (zstd) of a file is read, however the members fall
across read blocks: a decompressor is done at its member's end, and the next member (which may
start in the next block) gets a new one. Output is bounded three ways, so a small crafted file
(a decompression bomb) cannot exhaust memory or fill the disk:

* per call: at most MAX_CALL_OUTPUT bytes come out of one decompress call (zstd, whose
  decompressobj has no output limit, is fed ZSTD_SLICE_BYTES at a time: one zstd byte expands to
  at most ~32 KiB);
* per input: past `max_output` bytes (default: MAX_EXPANSION_RATIO times the compressed size,
  at least MIN_OUTPUT_BOUND) the input is skipped with `OutputTooLarge` naming the bound;
* per line: see `pipeline.kernels.text.text_stream.cut_pieces` (`max_line_bytes`).
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from collections.abc import Iterable, Iterator

from pipeline.kernels.text.cleaning import NotText

COMPRESSED_SUFFIXES = (".gz", ".bz2", ".zst", ".zstd", ".deflate", ".xz", ".lzma")
COMPRESSED_BLOCK_BYTES = 1 << 16  # compressed bytes fed per call (bz2, xz, gzip)
MAX_CALL_OUTPUT = 1 << 20  # decompressed bytes one call may return
ZSTD_SLICE_BYTES = 128  # zstd: compressed bytes per call (<= ~4 MiB out, whatever the content)
MAX_EXPANSION_RATIO = 256  # real text: 3-10x (bz2 of very repetitive text: ~100x); bombs: 10^3-10^6x
MIN_OUTPUT_BOUND = 256 << 20  # a small compressed file may still hold this much text
UNREADABLE = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


class OutputTooLarge(NotText):
    """A compressed input decompresses to more than its bound (a decompression bomb, or text far
    more repetitive than any book): skipped with this reason."""


def is_compressed(path: str) -> bool:
    return path.lower().endswith(COMPRESSED_SUFFIXES)


SNIFF_BYTES = 10  # enough for every signature below
_SIGNATURES = ((b"\x1f\x8b\x08", ".gz"), (b"\xfd7zXZ\x00", ".xz"), (b"\x28\xb5\x2f\xfd", ".zst"))
_BZIP2 = re.compile(rb"^BZh[1-9]1AY&SY")


def sniffed_suffix(head: bytes) -> str:
    """The suffix of the compression whose signature `head` (the first SNIFF_BYTES bytes or more of a
    file) starts with (gzip, bzip2, xz, zstd), or "": a compressed file under a name without its
    suffix (`book.txt` that is gzip) is read as what it is."""
    for signature, suffix in _SIGNATURES:
        if head.startswith(signature):
            return suffix
    return ".bz2" if _BZIP2.match(head) else ""


def output_bound(compressed_size: int) -> int:
    """The most bytes a compressed input of `compressed_size` bytes may decompress to."""
    return max(MIN_OUTPUT_BOUND, MAX_EXPANSION_RATIO * compressed_size)


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


class _Member:
    """One decompressor, fed until its member ends; `rest` then holds the bytes after the member."""

    def __init__(self, name: str) -> None:
        self._decompressor = _new_decompressor(name)
        self.eof = False
        self.rest = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The output of `data`, in pieces of bounded size, up to the member's end."""
        d = self._decompressor
        if isinstance(d, (bz2.BZ2Decompressor, lzma.LZMADecompressor)):
            out = d.decompress(data, MAX_CALL_OUTPUT)
            while True:
                if out:
                    yield out
                if d.eof or d.needs_input:
                    break
                out = d.decompress(b"", MAX_CALL_OUTPUT)
            self.eof, self.rest = d.eof, d.unused_data if d.eof else b""
        elif isinstance(d, _ZLIB_TYPE):
            while True:
                out = d.decompress(data, MAX_CALL_OUTPUT)
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof or (not data and len(out) < MAX_CALL_OUTPUT):
                    break
            self.eof, self.rest = d.eof, d.unused_data if d.eof else b""
        else:  # zstd: no output limit, so the input is fed in slices small enough to bound it
            for start in range(0, len(data), ZSTD_SLICE_BYTES):
                out = d.decompress(data[start: start + ZSTD_SLICE_BYTES])
                if out:
                    yield out
                if d.eof:
                    self.eof, self.rest = True, d.unused_data + data[start + ZSTD_SLICE_BYTES:]
                    return


_ZLIB_TYPE = type(zlib.decompressobj())


def decompressed(name: str, blocks: Iterable[bytes], max_output: int | None = None,
                 block_bytes: int | None = None) -> Iterator[bytes]:
    """The decompressed bytes of a stream compressed as `name`'s suffix says (the blocks as they
    are for an uncompressed name).

    Raises:
        EOFError: the stream ends before its end-of-stream marker (truncated), unlike Beam's
            readers, which return the part they could read.
        ValueError: a corrupt stream.
        OutputTooLarge: more than `max_output` bytes come out.
    """
    lower = name.lower()
    if _new_decompressor(lower) is None:
        yield from blocks
        return
    block_bytes = block_bytes or COMPRESSED_BLOCK_BYTES
    stream = _Members(lower, max_output)
    for block in blocks:
        for offset in range(0, len(block), block_bytes):
            yield from stream.feed(block[offset: offset + block_bytes])
    if not stream.ended:
        raise EOFError("compressed stream ended before its end-of-stream marker (truncated)")


class _Members:
    """A compressed stream's members one after another (a new decompressor at each member's start),
    its output counted against `max_output`."""

    def __init__(self, name: str, max_output: int | None) -> None:
        self._name = name
        self._single_stream = name.endswith(".deflate")
        self._max_output = max_output
        self._produced = 0
        self._member: _Member | None = None  # None: the next data starts a new member
        self.ended = False  # at least one member ended and no later one has begun

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The output of the next compressed bytes of the stream."""
        while data:
            if self._member is None:
                if self.ended and (self._single_stream or not data.strip(b"\x00")):
                    return  # trailing zero padding after the last gzip member is allowed
                self._member, self.ended = _Member(self._name), False
            member = self._member
            try:
                for out in member.feed(data):
                    self._produced += len(out)
                    if self._max_output is not None and self._produced > self._max_output:
                        raise OutputTooLarge(
                            f"too large: decompresses to more than {self._max_output:,} bytes (the bound for a "
                            f"compressed input: {MAX_EXPANSION_RATIO}x its size, at least "
                            f"{MIN_OUTPUT_BOUND >> 20} MiB; a decompression bomb?)")
                    yield out
            except (OutputTooLarge, *UNREADABLE):
                raise
            except Exception as error:  # zstd raises its own error type: report it as corrupt
                raise ValueError(f"corrupt compressed stream: {error}") from None
            if not member.eof:
                return
            data, self._member, self.ended = member.rest, None, True
