"""Turn the bytes of one input into clean text, or say why it is not text (Python, and one numba
kernel for the per-byte work: newlines and control bytes)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
HTML_START = re.compile(rb"^\s*(<!doctype\s+html|<html[\s>]|<head[\s>]|<\?xml)", re.IGNORECASE)
GUTENBERG_START = re.compile(r"^[ \t]*\*{3}[ \t]*START OF\b.*$", re.MULTILINE | re.IGNORECASE)
GUTENBERG_END = re.compile(r"^[ \t]*\*{3}[ \t]*END OF\b.*$", re.MULTILINE | re.IGNORECASE)
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_IS_CONTROL = np.zeros(256, dtype=np.uint8)
_IS_CONTROL[list(_CONTROL_BYTES)] = 1
# SWAR constants: 8 bytes of which none is below 0x20 or 0x7F hold no CR and no control byte.
_HIGH_BITS = np.uint64(0x8080808080808080)
_BELOW_SPACE = np.uint64(0x2020202020202020)
_DELETE = np.uint64(0x7F7F7F7F7F7F7F7F)
_BYTE_ONES = np.uint64(0x0101010101010101)
_CR = np.uint8(0x0D)
_LF = np.uint8(0x0A)
# Above this share of undecodable bytes or control characters, a file is binary, not text.
MAX_REPLACED_SHARE = 0.50
MAX_CONTROL_SHARE = 0.01

# Above this share of a file cut as Gutenberg header/licence, the manifest and the log say so.
LARGE_BOILERPLATE_SHARE = 0.25

SKIP_EMPTY = "empty: no text after cleaning"
SKIP_HTML = "not text: an HTML/XML page"
SKIP_BINARY_NUL = "not text: binary (NUL bytes)"
SKIP_BINARY_UNDECODABLE = "not text: binary (over half the bytes are not UTF-8)"
SKIP_BINARY_CONTROL = "not text: binary (over 1% control characters)"
SKIP_SURROGATE = "not text: holds a lone surrogate (not valid Unicode; no tokenizer takes it)"

_UNPACK = "unpack it and give the folder as --input"
_COMPRESSED_NAME = "data inside compressed data (compressed twice): decompress it once, e.g. `{} -d FILE`"
# (magic bytes at the start, the skip reason): formats a folder of books often holds besides text.
_FORMATS = (
    (b"%PDF-", "not text: a PDF document (extract the text first, e.g. `pdftotext FILE.pdf FILE.txt`)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "not text: a Microsoft Office document (.doc, .xls, .ppt): save it as "
                                          "plain text first"),
    (b"{\\rtf", "not text: an RTF document: save it as plain text first"),
    (b"\x1f\x8b", "not text: gzip " + _COMPRESSED_NAME.format("gzip")),
    (b"\xfd7zXZ\x00", "not text: xz " + _COMPRESSED_NAME.format("xz")),
    (b"\x28\xb5\x2f\xfd", "not text: zstd " + _COMPRESSED_NAME.format("zstd")),
    (b"7z\xbc\xaf\x27\x1c", f"not text: a 7z archive: {_UNPACK}"),
    (b"Rar!\x1a\x07", f"not text: a RAR archive: {_UNPACK}"),
    (b"PAR1", "not text: a Parquet file: name it .parquet (its --text_column is read)"),
    (b"\x89PNG\r\n\x1a\n", "not text: a PNG image"),
    (b"\xff\xd8\xff", "not text: a JPEG image"),
    (b"GIF87a", "not text: a GIF image"),
    (b"GIF89a", "not text: a GIF image"),
)
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_BZIP2 = re.compile(rb"^BZh[1-9]1AY&SY")


def binary_format(head: bytes) -> str | None:
    """The skip reason of an input whose first bytes (4 KiB or more read, decompressed) are those of
    a known binary format (PDF, zip and what is built on it: EPUB, .docx and OpenDocument; other
    archives, office files, images; compressed data once decompressed: compressed twice), naming it
    and what to do;
    None for anything else (text, or binary the later checks catch)."""
    if head.startswith(_ZIP_STARTS):
        if head[30:38] == b"mimetype" and b"application/epub+zip" in head[38:90]:
            return "not text: an EPUB book (a zip archive): convert it to text first, e.g. with Calibre's " \
                   "`ebook-convert FILE.epub FILE.txt` or pandoc"
        if head[30:38] == b"mimetype" and b"application/vnd.oasis.opendocument" in head[38:120]:
            return "not text: an OpenDocument file (.odt): save it as plain text first"
        if b"[Content_Types].xml" in head or b"word/" in head:
            return "not text: a Word document (.docx, a zip archive): save it as plain text first"
        return f"not text: a zip archive: {_UNPACK}"
    if _BZIP2.match(head):
        return "not text: bzip2 " + _COMPRESSED_NAME.format("bzip2")
    if len(head) >= 262 and head[257:262] == b"ustar":
        return f"not text: a tar archive: {_UNPACK}"
    for magic, reason in _FORMATS:
        if head.startswith(magic):
            return reason
    return None


@intrinsic
def _store8(typingctx, array, start, value):
    """array[start:start + 8] = the 8 bytes of `value`, little-endian (uint8 array, in bounds: not
    checked): one unaligned store."""
    if not isinstance(array, types.Array) or array.dtype != types.uint8 or not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        target = context.make_array(signature.args[0])(context, builder, args[0])
        address = builder.gep(target.data, [args[1]])
        value = args[2]
        if sys.byteorder == "big":  # the inverse of load8's swap
            i64 = ir.IntType(64)
            swap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.bswap.i64")
            value = builder.call(swap, [value])
        builder.store(value, builder.bitcast(address, ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(array, start, types.uint64), codegen


@kernel()
def _newlines_and_controls(data, is_control, out):
    """Copy data into out (8 bytes longer) with CRLF and lone CR as LF; (bytes written, control
    bytes, CR bytes). Eight bytes at a time where none of them is below 0x20 or 0x7F."""
    n = data.shape[0]
    i = 0
    j = 0
    controls = 0
    carriage_returns = 0
    while i < n:
        if i + 8 <= n:
            chunk = load8(data, i)
            deletes = chunk ^ _DELETE
            if ((chunk - _BELOW_SPACE) & ~chunk & _HIGH_BITS) | ((deletes - _BYTE_ONES) & ~deletes & _HIGH_BITS) == 0:
                _store8(out, j, chunk)
                i += 8
                j += 8
                continue
        b = data[i]
        is_cr = b == _CR
        out[j] = _LF if is_cr else b
        follows = data[i + 1] if i + 1 < n else np.uint8(0)
        j += np.int64(not (is_cr and follows == _LF))
        controls += np.int64(is_control[b])
        carriage_returns += np.int64(is_cr)
        i += 1
    return j, controls, carriage_returns


def normalize_newline_bytes(data: bytes) -> tuple[bytes, int]:
    """(data with CRLF and lone CR as LF, its control bytes): what `bytes.replace` twice and
    `bytes.translate` give, in one pass. CR and LF never occur inside a multi-byte UTF-8 sequence."""
    out = np.empty(len(data) + 8, dtype=np.uint8)
    written, controls, carriage_returns = _newlines_and_controls(np.frombuffer(data, dtype=np.uint8), _IS_CONTROL, out)
    return (out[:written].tobytes() if carriage_returns else data), controls


class NotText(ValueError):
    """The input is not text we can train on; the message is the reason recorded in the manifest."""


@dataclass(frozen=True)
class CleanText:
    text: str
    replaced_bytes: int
    boilerplate_chars_removed: int


def decode(data: bytes) -> tuple[str, int]:
    """Decode bytes as UTF-8 (UTF-16 when it has a BOM), replacing invalid bytes; return (text, replaced)."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    elif data.startswith(UTF16_BOMS):
        text = data.decode("utf-16", errors="replace")
        return text, text.count("\ufffd")
    return decode_utf8(data)


def decode_utf8(data: bytes) -> tuple[str, int]:
    """Decode bytes as UTF-8 whatever they start with (a part of an input: a BOM-like start is
    text there), replacing invalid bytes; return (text, replaced)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        # surrogateescape maps each invalid byte to one lone surrogate: count them, then replace.
        escaped = data.decode("utf-8", errors="surrogateescape")
        text, replaced = _ESCAPED_BYTE.subn("\ufffd", escaped)
        return text, replaced


def normalize_newlines(text: str) -> str:
    """CRLF and lone CR become LF."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def find_marker(pattern: re.Pattern, text: str, position: int) -> re.Match | None:
    """The first line at or after `position` that `pattern` matches. Markers start with `***`:
    finding those with str.find and matching only their lines is ~20x faster than running the
    case-insensitive line regex over a whole book."""
    hit = text.find("***", position)
    while hit >= 0:
        line_start = text.rfind("\n", 0, hit) + 1
        if line_start >= position and not text[line_start:hit].strip(" \t"):
            match = pattern.match(text, line_start)
            if match:
                return match
        hit = text.find("***", hit + 3)
    return None


def strip_gutenberg(text: str) -> tuple[str, int]:
    """Keep the body of every Project Gutenberg book in the text: each `*** START OF` line opens a
    body, which the next `*** END OF` line closes; the header before a start and the licence after
    an end are dropped. A file holding several books one after another keeps all their bodies. An
    end marker counts only after a start marker, so a text without one keeps everything (a line
    that happens to read `*** END OF` does not cut a non-Gutenberg text). Returns (text, chars
    removed)."""
    bodies: list[str] = []
    position = 0
    while True:
        start = find_marker(GUTENBERG_START, text, position)
        if start is None:
            break
        end = find_marker(GUTENBERG_END, text, start.end())
        bodies.append(text[start.end(): end.start() if end else len(text)])
        if end is None:
            break
        position = end.end()
    if not bodies:
        return text, 0
    kept = "\n".join(bodies)
    return kept, len(text) - sum(len(body) for body in bodies)


def clean_bytes(data: bytes, keep_boilerplate: bool = False) -> CleanText:
    """Bytes of one book to clean text.

    Raises:
        NotText: for HTML pages, binary files and files with no text; the message is the reason.
    """
    if HTML_START.match(data[:4096]):
        raise NotText(SKIP_HTML)
    known = binary_format(data[:4096])
    if known:
        raise NotText(known)
    is_utf16 = data.startswith(UTF16_BOMS)
    if not is_utf16 and b"\x00" in data:
        raise NotText(SKIP_BINARY_NUL)
    if not is_utf16:  # control characters are single bytes in UTF-8: counted on the bytes
        data, controls = normalize_newline_bytes(data)
    text, replaced = decode(data)
    if data and replaced > MAX_REPLACED_SHARE * len(data):
        raise NotText(SKIP_BINARY_UNDECODABLE)
    if is_utf16:
        controls = len(CONTROL.findall(text))
    if text and controls > MAX_CONTROL_SHARE * len(text):
        raise NotText(SKIP_BINARY_CONTROL)
    return clean_text(text, replaced, keep_boilerplate)


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point (U+D800-U+DFFF). In a str every one is a lone one
    (a valid pair is one code point): not Unicode text. The strict UTF-8 encoder refuses exactly
    these code points and nothing else, in C at ~1.4 GB/s, where a regex character class walks the
    text at a few hundred MB/s."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clean_text(text: str, replaced_bytes: int = 0, keep_boilerplate: bool = False) -> CleanText:
    """Normalise newlines and strip Gutenberg boilerplate from decoded text.

    Raises:
        NotText: when nothing but whitespace is left, or the text holds a lone surrogate (a JSON
            record's `"\\ud800"`: decoded bytes never do).
    """
    if not text.isascii() and has_lone_surrogate(text):
        raise NotText(SKIP_SURROGATE)
    text = normalize_newlines(text)
    removed = 0
    if not keep_boilerplate:
        text, removed = strip_gutenberg(text)
    if not text.strip():
        raise NotText(SKIP_EMPTY)
    return CleanText(text=text, replaced_bytes=replaced_bytes, boilerplate_chars_removed=removed)
