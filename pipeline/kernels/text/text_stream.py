"""Clean a text input piece by piece, in bounded memory, into exactly the text `clean_bytes` gives
for the whole input (pure Python).

A raw byte stream is re-cut into pieces of about PIECE_BYTES that end where cutting changes
nothing: after a paragraph break (a blank line and the whitespace after it), else after a newline,
else after a space. Newlines, spaces and CR are ASCII, so no UTF-8 sequence and no CRLF pair spans
two pieces, and each piece decodes and normalises on its own to its share of the whole text.
Gutenberg boilerplate is stripped by a small state machine over the pieces (`GutenbergStripper`).
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from pipeline.kernels.text.cleaning import (
    CONTROL,
    GUTENBERG_END,
    GUTENBERG_START,
    HTML_START,
    MAX_CONTROL_SHARE,
    MAX_REPLACED_SHARE,
    SKIP_BINARY_CONTROL,
    SKIP_BINARY_NUL,
    SKIP_BINARY_UNDECODABLE,
    SKIP_EMPTY,
    SKIP_HTML,
    UTF8_BOM,
    UTF16_BOMS,
    NotText,
    binary_format,
    decode_utf8,
    find_marker,
    normalize_newline_bytes,
)
from pipeline.kernels.text.quality import MinHasher, script_letter_counts

PIECE_BYTES = 8 << 20
_HTML_PROBE = 4096
_BREAK = re.compile(rb"\n[ \t]*\r?\n[\s]*")
_NOT_SPACE = re.compile(r"\S")  # a character that str.isspace() says is no whitespace (checked for all)


def _cut_point(buffer: bytearray, size: int, at_spaces: bool) -> int:
    """Where to end the next piece of `buffer` (which holds more than `size` bytes): after the last
    paragraph break that starts within the first `size` bytes, else after the last newline, else (if
    `at_spaces`) after the last space, else at a UTF-8 character boundary; 0 when `at_spaces` is
    False and there is no newline at all yet (a JSON line is never cut)."""
    window = bytes(buffer[:size])
    newline = window.rfind(b"\n")
    carriage = window.rfind(b"\r")
    if carriage > newline and buffer[carriage + 1] != 0x0A:  # a lone CR ends a line too
        newline = carriage
    if newline >= 0:
        start = max(window.rfind(b"\n\n"), window.rfind(b"\n\r\n"))
        match = _BREAK.match(buffer, start) if start >= 0 else None
        if match and match.end() < len(buffer):
            run = bytes(buffer[start: match.end()])
            return start + max(run.rfind(b"\n"), run.rfind(b"\r")) + 1  # the next piece starts a line
        return newline + 1
    if not at_spaces:
        return 0
    space = window.rfind(b" ")
    if space >= 0:
        return space + 1
    cut = size
    while cut > size - 4 and buffer[cut] & 0xC0 == 0x80:  # not inside a UTF-8 sequence
        cut -= 1
    return cut - 1 if buffer[cut - 1] == 0x0D else cut  # nor between a CR and its LF


def cut_pieces(blocks: Iterable[bytes], piece_bytes: int = PIECE_BYTES, at_spaces: bool = True,
               max_line_bytes: int = 0, on_long_line: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Re-cut a byte stream into pieces of about `piece_bytes` at the safe points of `_cut_point`.
    With `at_spaces` False, pieces end only at newlines (a line longer than a piece stays whole),
    and (with `max_line_bytes`) every line of more than `max_line_bytes` bytes before its LF or CR
    is dropped, wherever the blocks end, and never held whole: `on_long_line(its length)` is called."""
    if max_line_bytes and not at_spaces:
        yield from _without_long_lines(_cut_pieces(blocks, piece_bytes, at_spaces, max_line_bytes, on_long_line),
                                       max_line_bytes, on_long_line)
    else:
        yield from _cut_pieces(blocks, piece_bytes, at_spaces, 0, None)


def _cut_pieces(blocks: Iterable[bytes], piece_bytes: int, at_spaces: bool, max_line_bytes: int,
                on_long_line: Callable[[int], None] | None) -> Iterator[bytes]:
    buffer = bytearray()
    skipping = 0  # > 0: inside a dropped long line, this many of its bytes seen
    for block in blocks:
        if skipping:
            newline = _line_end(block)
            if newline < 0:
                skipping += len(block)
                continue
            _report(on_long_line, skipping + newline)
            skipping, block = 0, block[newline + 1:]
        buffer += block
        while len(buffer) > 2 * piece_bytes:
            cut = _cut_point(buffer, piece_bytes, at_spaces) or buffer.find(b"\n", piece_bytes) + 1
            if not cut:
                break  # one line longer than the buffer: read on until its newline
            yield bytes(buffer[:cut])
            del buffer[:cut]
        if max_line_bytes and len(buffer) > max_line_bytes:
            start = max(buffer.rfind(b"\n"), buffer.rfind(b"\r")) + 1  # the unfinished last line starts here
            if len(buffer) - start > max_line_bytes:
                if start:
                    yield bytes(buffer[:start])
                skipping = len(buffer) - start
                buffer = bytearray()
    if skipping:
        _report(on_long_line, skipping)
    while len(buffer) > piece_bytes:
        cut = _cut_point(buffer, piece_bytes, at_spaces) or buffer.find(b"\n", piece_bytes) + 1
        if not cut:
            break
        yield bytes(buffer[:cut])
        del buffer[:cut]
    if buffer:
        yield bytes(buffer)


def _line_end(block: bytes) -> int:
    """The first LF or CR of a block (a lone CR ends a line too), or -1."""
    ends = [i for i in (block.find(b"\n"), block.find(b"\r")) if i >= 0]
    return min(ends) if ends else -1


def _without_long_lines(pieces: Iterable[bytes], max_line_bytes: int,
                        on_long_line: Callable[[int], None] | None) -> Iterator[bytes]:
    """Pieces ending at newlines, without their lines longer than `max_line_bytes`."""
    for piece in pieces:
        if len(piece) <= max_line_bytes:
            yield piece
            continue
        codes = np.frombuffer(piece, dtype=np.uint8)
        ends = np.flatnonzero((codes == 0x0A) | (codes == 0x0D))
        starts = np.concatenate(([0], ends + 1))
        ends = np.concatenate((ends, [len(piece)]))
        long = np.flatnonzero(ends - starts > max_line_bytes)
        if not long.size:
            yield piece
            continue
        kept, position = [], 0
        for i in long:
            kept.append(piece[position: starts[i]])
            _report(on_long_line, int(ends[i] - starts[i]))
            position = int(ends[i]) + 1
        kept.append(piece[position:])
        yield b"".join(kept)


def _report(on_long_line: Callable[[int], None] | None, length: int) -> None:
    if on_long_line is not None:
        on_long_line(length)


@dataclass
class RawTextStats:
    """What the binary checks of `clean_bytes` need, summed over the pieces."""

    data_bytes: int = 0  # bytes after CRLF normalisation (UTF-16: the raw bytes)
    chars: int = 0  # characters of the decoded text
    replaced: int = 0
    controls: int = 0
    raw_end: int = 0  # input bytes up to the end of the piece last handed out (UTF-8 input only)
    utf16: bool = False
    # (the piece last handed out, its UTF-8) when that is the piece's bytes, decoded without a
    # replacement: the first pass hashes those bytes rather than encoding the text again
    utf8: tuple[str, bytes] | None = field(default=None, repr=False, compare=False)

    def check(self) -> None:
        """Raise NotText as `clean_bytes` does for undecodable or control-heavy input."""
        if self.data_bytes and self.replaced > MAX_REPLACED_SHARE * self.data_bytes:
            raise NotText(SKIP_BINARY_UNDECODABLE)
        if self.chars and self.controls > MAX_CONTROL_SHARE * self.chars:
            raise NotText(SKIP_BINARY_CONTROL)


def _utf16_as_utf8(first: bytes, blocks: Iterator[bytes]) -> Iterator[bytes]:
    """A UTF-16 stream (with its BOM) decoded incrementally and re-encoded as UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
    yield decoder.decode(first).encode("utf-8", "surrogatepass")
    for block in blocks:
        yield decoder.decode(block).encode("utf-8", "surrogatepass")
    yield decoder.decode(b"", final=True).encode("utf-8", "surrogatepass")


def decoded_pieces(blocks: Iterable[bytes], stats: RawTextStats, piece_bytes: int = PIECE_BYTES,
                   at_spaces: bool = True, at_start: bool = True, nul_is_binary: bool = True,
                   max_line_bytes: int = 0, on_long_line: Callable[[int], None] | None = None,
                   html_is_page: bool = True) -> Iterator[str]:
    """The decoded, newline-normalised text of a raw byte stream, in pieces. Counts into `stats`;
    call `stats.check()` after the last piece for the binary checks that need the whole input.
    `at_start` False: the stream is a later byte range of a UTF-8 input (no HTML probe, no BOM).
    `nul_is_binary` False (records, one a line): NUL bytes stay in the text, for the caller to
    skip their lines. `max_line_bytes` and `on_long_line`: see `cut_pieces`. `html_is_page` False
    (records): an input starting like an HTML page is not refused whole (its lines are judged).

    Raises:
        NotText: for an HTML page, or NUL bytes in a non-UTF-16 input (as soon as one is seen).
    """
    blocks = iter(blocks)
    head = b""
    for block in blocks:  # enough bytes for the HTML probe and the BOM
        head += block
        if len(head) >= _HTML_PROBE:
            break
    if at_start and html_is_page and HTML_START.match(head[:_HTML_PROBE]):
        raise NotText(SKIP_HTML)
    known = binary_format(head[:_HTML_PROBE]) if at_start else None
    if known:
        raise NotText(known)
    is_utf16 = stats.utf16 = at_start and head.startswith(UTF16_BOMS)
    if is_utf16:
        stream: Iterable[bytes] = _utf16_as_utf8(head, _counting(blocks, stats))
        stats.data_bytes += len(head)
    else:
        has_bom = at_start and head.startswith(UTF8_BOM)
        stats.data_bytes += len(UTF8_BOM) if has_bom else 0  # clean_bytes counts it in the input's size
        stats.raw_end += len(UTF8_BOM) if has_bom else 0
        stream = _chain_first(head[len(UTF8_BOM):] if has_bom else head, blocks)
    for piece in cut_pieces(stream, piece_bytes, at_spaces, max_line_bytes, on_long_line):
        if is_utf16:
            text = piece.decode("utf-8", "surrogatepass")
            stats.replaced += text.count("\ufffd")
            stats.controls += len(CONTROL.findall(text))
            stats.chars += len(text)  # clean_bytes measures UTF-16 text before normalising newlines
            text = text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
            stats.utf8 = None
        else:
            stats.raw_end += len(piece)
            if nul_is_binary and b"\x00" in piece:
                raise NotText(SKIP_BINARY_NUL)
            piece, controls = normalize_newline_bytes(piece)
            text, replaced = decode_utf8(piece)  # a BOM only counts at the input's start (above)
            stats.data_bytes += len(piece)
            stats.replaced += replaced
            stats.controls += controls
            if not nul_is_binary:  # NUL lines are skipped records, not the input's text
                stats.controls -= piece.count(b"\x00")
            stats.chars += len(text)
            stats.utf8 = (text, piece) if not replaced else None
        yield text


def _chain_first(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _counting(blocks: Iterator[bytes], stats: RawTextStats) -> Iterator[bytes]:
    for block in blocks:
        stats.data_bytes += len(block)
        yield block


JOIN = (-1, -1)  # GutenbergStripper.feed_spans: the "\n" between two bodies
MAX_MARKER_LINE_CHARS = 1 << 20  # a marker line is held back until its end, up to this length


def _may_be_marker(line_start: str) -> bool:
    """Whether an unfinished line could still turn out to be a `*** START/END OF` line."""
    rest = line_start.lstrip(" \t")
    return ("***".startswith(rest) or rest.startswith("***")) and len(line_start) <= MAX_MARKER_LINE_CHARS


class GutenbergStripper:
    """`strip_gutenberg` over a stream of pieces cut anywhere: yields the text of the books' bodies
    (a "\\n" between two bodies), as the whole-text function keeps them. An unfinished last line
    that may be a marker line is held back until its end (or `feed(final=True)`), and a piece that
    starts inside a line is searched for markers only from its first line start, so a marker split
    across pieces is found and a `***` inside a line never is.
    `found_start` says whether any `*** START OF` line was seen; a text without one is kept whole,
    which only the caller can do once the stream has ended."""

    def __init__(self, state: tuple[bool, int] = (False, 0)) -> None:
        self._in_body, self._bodies = state
        self.found_start = self._bodies > 0
        self.body_chars = 0  # characters kept in bodies (without the joining newlines)
        self._held = ""  # the start of an unfinished line that may be a marker line
        self._at_line_start = True  # the next text starts a line

    @property
    def state(self) -> tuple[bool, int]:
        """(inside a body, bodies begun so far): where a later byte range of the input resumes."""
        return self._in_body, self._bodies

    @property
    def at_line_start(self) -> bool:
        """Nothing is held back and the next text starts a line: a byte range may start here with
        only `state`."""
        return self._at_line_start and not self._held

    def feed(self, text: str, final: bool = False) -> Iterator[str]:
        """The body text in `text` (and in what was held back before it)."""
        text, spans = self.feed_spans(text, final)
        return (text[start:stop] if start >= 0 else "\n" for start, stop in spans)

    def feed_spans(self, text: str, final: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """`feed` as (the text searched: what was held back, `text`, less what is held back now;
        the (start, stop) of each body part in it, in order, JOIN for the "\n" between two
        bodies). Empty parts are left out."""
        text, self._held = self._held + text, ""
        at_line_start = self._at_line_start
        if not final:
            cut = text.rfind("\n") + 1
            if (cut or at_line_start) and cut < len(text) and _may_be_marker(text[cut:]):
                text, self._held = text[:cut], text[cut:]
        if text:
            self._at_line_start = text.endswith("\n")
        search_from = 0 if at_line_start else (text.find("\n") + 1 or len(text) + 1)
        return text, list(self._strip(text, search_from))

    def _strip(self, text: str, search_from: int) -> Iterator[tuple[int, int]]:
        position = 0
        while position <= len(text):
            if not self._in_body:
                start = find_marker(GUTENBERG_START, text, max(position, search_from))
                if start is None:
                    return
                self.found_start = True
                self._in_body = True
                if self._bodies:
                    yield JOIN
                self._bodies += 1
                position = start.end()
                continue
            end = find_marker(GUTENBERG_END, text, max(position, search_from))
            stop = end.start() if end else len(text)
            self.body_chars += max(stop - position, 0)
            if stop > position:
                yield position, stop
            if end is None:
                return
            self._in_body = False
            position = end.end()


class TextMeasure:
    """What one pass over a document's clean text yields: its content digest (sha256 of the UTF-8,
    as `content_digest`), length, letters per script, whether it holds anything but whitespace,
    and (given `signature_bytes`, the size that sizes its table) its MinHash signature."""

    def __init__(self, signature_bytes: int | None = None, signature_seed: int = 0) -> None:
        self.sha256 = hashlib.sha256()
        self.chars = 0
        self.utf8_bytes = 0
        self.letters: np.ndarray | None = None
        self.has_text = False
        self._signature_args = (signature_bytes, signature_seed)
        self._hasher: MinHasher | None = None

    def add(self, text: str) -> None:
        self.add_utf8(text.encode("utf-8", "surrogatepass"), text, 0, len(text))

    def add_utf8(self, data: bytes | memoryview, text: str, start: int, stop: int) -> None:
        """Add text[start:stop], whose UTF-8 the caller has: `data` (neither is copied)."""
        self.sha256.update(data)
        self.chars += stop - start
        self.utf8_bytes += len(data)
        self.letters = script_letter_counts(data, self.letters)
        self.has_text = self.has_text or _NOT_SPACE.search(text, start, stop) is not None  # not str.isspace()
        if self._signature_args[0] is not None:
            if self._hasher is None:
                self._hasher = MinHasher(*self._signature_args)
            self._hasher.update(data)

    @property
    def digest(self) -> str:
        return self.sha256.hexdigest()

    def signature(self) -> np.ndarray | None:
        if self._signature_args[0] is None:
            return None
        return (self._hasher or MinHasher(*self._signature_args)).signature()


@dataclass(frozen=True)
class ByteRange:
    """A byte range of a UTF-8 text input that starts and ends at piece boundaries, and the
    Gutenberg stripper's state where it starts."""

    start: int
    stop: int
    strip_state: tuple[bool, int]


@dataclass
class TextScan:
    """The first pass over a text input: the measure of its clean text and how to clean it again."""

    measure: TextMeasure
    strip: bool  # the text has a Gutenberg START line: only the bodies are kept
    replaced_bytes: int
    boilerplate_chars_removed: int
    ranges: list[ByteRange] = field(default_factory=list)  # with `split_bytes`: the input in ranges


def scan_text(pieces: Iterable[str], stats: RawTextStats, keep_boilerplate: bool, signature_bytes: int | None = None,
              signature_seed: int = 0, split_bytes: int = 0) -> TextScan:
    """Measure the clean text of decoded pieces (from `decoded_pieces`) without holding it: the
    whole text and the Gutenberg bodies are measured side by side until a START line is found
    (only the end of the stream says whether one exists). With `split_bytes`, also cut the input
    into byte ranges of at least that size at piece boundaries (UTF-8 input only).

    Raises:
        NotText: as `clean_bytes` would for the whole input.
    """
    whole, body = TextMeasure(signature_bytes, signature_seed), TextMeasure(signature_bytes, signature_seed)
    stripper = GutenbergStripper()
    ranges: list[ByteRange] = []
    range_start, range_state = 0, stripper.state
    for text in pieces:
        data = stats.utf8[1] if stats.utf8 is not None and stats.utf8[0] is text else None
        if not keep_boilerplate:
            searched, spans = stripper.feed_spans(text)
            _measure_spans(body, searched, spans, data if searched is text else None)
        if stripper.found_start:  # (after the feed: a START line in this piece spares measuring it whole)
            whole.chars += len(text)  # the bodies are kept: of the whole, only its length is needed
        elif data is not None:
            whole.add_utf8(data, text, 0, len(text))
        else:
            whole.add(text)
        if split_bytes and stats.raw_end - range_start >= split_bytes and stripper.at_line_start:
            ranges.append(ByteRange(range_start, stats.raw_end, range_state))
            range_start, range_state = stats.raw_end, stripper.state
    if not keep_boilerplate:
        _measure_spans(body, *stripper.feed_spans("", final=True), None)
    stats.check()
    if split_bytes and not stats.utf16:
        if stats.raw_end > range_start or not ranges:
            ranges.append(ByteRange(range_start, stats.raw_end, range_state))
    else:
        ranges = []
    strip = stripper.found_start
    kept = body if strip else whole
    if not kept.has_text:
        raise NotText(SKIP_EMPTY)
    return TextScan(measure=kept, strip=strip, replaced_bytes=stats.replaced,
                    boilerplate_chars_removed=whole.chars - stripper.body_chars if strip else 0, ranges=ranges)


def _measure_spans(measure: TextMeasure, text: str, spans: list[tuple[int, int]], data: bytes | None) -> None:
    """Add the body parts `spans` of `text` (see `GutenbergStripper.feed_spans`) to `measure`,
    their UTF-8 cut from `data` (the UTF-8 of `text`) when given."""
    view = memoryview(data) if data is not None else None
    for start, stop in spans:
        if start < 0:
            measure.add("\n")
        elif view is None:
            measure.add(text[start:stop])
        else:
            measure.add_utf8(view[_utf8_offset(text, view, start): _utf8_offset(text, view, stop)], text, start, stop)


def _utf8_offset(text: str, data: memoryview, index: int) -> int:
    """The byte offset in `data` (the UTF-8 of `text`) of character `index`: only the shorter side
    is encoded (a book's header or licence, not its body)."""
    if len(data) == len(text):  # ASCII
        return index
    if index <= len(text) // 2:
        return len(text[:index].encode("utf-8", "surrogatepass"))
    return len(data) - len(text[index:].encode("utf-8", "surrogatepass"))


def clean_pieces(pieces: Iterable[str], strip: bool, strip_state: tuple[bool, int] = (False, 0)) -> Iterator[str]:
    """The clean text of decoded pieces, given `TextScan.strip` from the first pass (and, for a
    later byte range, the stripper's state where it starts)."""
    if not strip:
        yield from (text for text in pieces if text)
        return
    stripper = GutenbergStripper(strip_state)
    for text in pieces:
        yield from stripper.feed(text)
    yield from stripper.feed("", final=True)
