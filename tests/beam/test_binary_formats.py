"""Inputs in a binary format a folder of books often holds are skipped naming the format and what to do
(they were all 'not text: binary (NUL bytes)'), on both reading paths: the streaming reader the jobs use
and `clean_bytes`; compressed inputs are read and judged by what they hold."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import zipfile

import pytest

from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import expand_inputs, split_large_inputs
from pipeline.kernels.text.cleaning import NotText, clean_bytes

BOOK = "It was the best of times, it was the worst of times.\n\n" * 200


def _zip(entries: list[tuple[str, str]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in entries:
            archive.writestr(name, text, compress_type=zipfile.ZIP_STORED if name == "mimetype" else
                             zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def _tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = BOOK.encode()
        info = tarfile.TarInfo("book.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\nstream\n\x00\x01\x02 x\x9c\nendstream\n"
FILES = {
    "paper.pdf": (PDF, "a PDF document (extract the text first"),
    "books.zip": (_zip([("book.txt", BOOK)]), "a zip archive: unpack it"),
    "novel.epub": (_zip([("mimetype", "application/epub+zip"), ("OEBPS/ch1.xhtml", BOOK)]),
                   "an EPUB book (a zip archive): convert it to text first"),
    "letter.docx": (_zip([("[Content_Types].xml", "<Types/>"), ("word/document.xml", BOOK)]),
                    "a Word document (.docx, a zip archive): save it as plain text first"),
    "essay.odt": (_zip([("mimetype", "application/vnd.oasis.opendocument.text"), ("content.xml", BOOK)]),
                  "an OpenDocument file (.odt): save it as plain text first"),
    "old.doc": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "a Microsoft Office document"),
    "books.tar": (_tar(), "a tar archive: unpack it"),
    "cover.png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 100, "a PNG image"),
    "paper.pdf.gz": (gzip.compress(PDF), "a PDF document"),  # decompressed, then judged by its content
    "twice.txt.gz": (gzip.compress(gzip.compress(BOOK.encode())), "gzip data inside compressed data (compressed "
                                                                 "twice): decompress it once"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("binary")
    for name, (data, _) in FILES.items():
        (root / name).write_bytes(data)
    (root / "real.txt.gz").write_bytes(gzip.compress(BOOK.encode()))
    return root


def test_each_format_is_named_with_what_to_do(folder):
    reasons = {}
    for unit in expand_inputs([str(folder)]):
        reasons[unit.source.rsplit("/", 1)[1]] = UnitReader(unit, "text", keep_boilerplate=True).scan().skip_reason
    assert reasons.pop("real.txt.gz") is None  # compressed text is read
    for name, (_, expected) in FILES.items():
        assert reasons[name].startswith("not text: ") and expected in reasons[name], (name, reasons[name])


@pytest.mark.parametrize("name", [n for n in FILES if not n.endswith(".gz")])  # clean_bytes reads raw bytes
def test_clean_bytes_gives_the_same_reasons(folder, name):
    unit = next(u for u in expand_inputs([str(folder / name)]))
    with pytest.raises(NotText) as error:
        clean_bytes((folder / name).read_bytes())
    assert str(error.value) == UnitReader(unit, "text", keep_boilerplate=True).scan().skip_reason


def test_text_that_merely_starts_like_a_format_is_read():
    for text in ("PK is what the team called it.\n" * 50, "GIF8 of them came back.\n" * 50, "BZh1 was the code.\n" * 50):
        assert clean_bytes(text.encode()).text.startswith(text[:10])


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_data_under_a_plain_name_is_read_and_never_split(tmp_path, compress):
    """A `book.txt` (or `.jsonl`) that is gzip (bzip2, xz) was skipped as binary: it is read as what
    its first bytes say it is, and never cut into byte ranges (offsets in compressed bytes mean nothing)."""
    (tmp_path / "book.txt").write_bytes(compress(BOOK.encode()))
    (tmp_path / "rows.jsonl").write_bytes(compress("".join(json.dumps({"text": BOOK}) + "\n" for _ in range(3)).encode()))
    for unit in expand_inputs([str(tmp_path)]):
        reader = UnitReader(unit, "text", keep_boilerplate=True)
        assert reader.scan().skip_reason is None, unit.source
        texts = ["".join(pieces) for _, pieces in reader.documents()]
        assert texts == [BOOK] * (3 if unit.source.endswith(".jsonl") else 1), unit.source  # as the plain file
        assert split_large_inputs([unit], split_bytes=64) == [unit]  # neither split nor marked for ranges
