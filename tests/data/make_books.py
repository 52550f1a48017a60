"""Cut the book excerpts in tests/data/books from the shared corpus (run it from the repo root, with
the corpus in ../shared or MASKBEAM_SHARED: `python tests/data/make_books.py`). The cuts are fixed
here, so the same corpus gives byte-identical excerpts; tests/data/README.md says why each has its size.

Each excerpt keeps the book's raw bytes (CRLF line ends, no BOM) from the first blank line at `start`
bytes into the body (after the `*** START OF` line) up to the last blank line before `start + size`,
so it holds whole paragraphs and no Project Gutenberg boilerplate. With `boilerplate`, the book's
own header (BOM, title lines, the start line) and its whole licence (from the `*** END OF` line to
the end of the file) stand around the excerpt, as in the downloaded file. An HTML page keeps its
bytes up to the end of its `<head>`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = HERE / "books"
PARAGRAPH = b"\r\n\r\n"


class Cut(NamedTuple):
    name: str
    start: int  # bytes into the body
    size: int  # at most this many bytes of body
    boilerplate: bool = False


CUTS = (
    Cut("drama__hamlet.txt", 20_000, 10_000, boilerplate=True),
    Cut("classics__great_gatsby.txt", 20_000, 10_000),
    Cut("poetry__beowulf.txt", 40_000, 10_000),
    Cut("classics__shen_yin_yu.txt", 20_000, 10_000),
    Cut("classics__ang_filibusterismo.txt", 40_000, 10_000),
    Cut("classics__don_quixote.txt", 135_000, 16_000),
    Cut("classics__pride_and_prejudice.txt", 35_000, 60_000),
    Cut("poetry__iliad.txt", 120_000, 10_000),
    Cut("poetry__odyssey.txt", 60_000, 10_000),
)
HTML_PAGES = ("classics__humphry_clinker.txt", "philosophy__tractatus.txt", "poetry__spoon_river_anthology.txt")


def _marker_line(data: bytes, marker: bytes, since: int = 0) -> tuple[int, int]:
    """(start, end) of the line holding `marker`, its line end included."""
    at = data.index(marker, since)
    begin = data.rfind(b"\n", 0, at) + 1
    return begin, data.index(b"\n", at) + 1


def excerpt(data: bytes, cut: Cut) -> bytes:
    header_begin, body_begin = _marker_line(data, b"*** START OF")
    end_begin, _ = _marker_line(data, b"*** END OF", body_begin)
    first = data.index(PARAGRAPH, body_begin + cut.start) + len(PARAGRAPH)
    last = data.rindex(PARAGRAPH, first, min(first + cut.size, end_begin)) + len(PARAGRAPH)
    body = data[first:last]
    if not cut.boilerplate:
        return body
    return data[:body_begin] + b"\r\n" + body + data[end_begin:]


def html_head(data: bytes) -> bytes:
    return data[: data.index(b"</head>") + len(b"</head>\n")]


def main() -> None:
    books = Path(os.environ.get("MASKBEAM_SHARED", REPO.parent / "shared")) / "corpus" / "books"
    if not books.is_dir():
        sys.exit(f"no shared corpus under {books}: set MASKBEAM_SHARED to the folder holding corpus/books")
    OUT.mkdir(exist_ok=True)
    for cut in CUTS:
        (OUT / cut.name).write_bytes(excerpt((books / cut.name).read_bytes(), cut))
    for name in HTML_PAGES:
        (OUT / name).write_bytes(html_head((books / name).read_bytes()))
    for path in sorted(OUT.iterdir()):
        print(f"{path.stat().st_size:>7,} {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
