"""Reading hostile inputs: compressed members that end at a block end, decompression bombs, huge
lines, byte ranges of odd .jsonl files, links out of the input folder, folders as inputs. Each
test fed an input that was lost, mangled, looped or exhausted memory before (issues 23, 26)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import random
import threading
import tracemalloc

import pytest
import zstandard

from pipeline.beam.reading import compression
from pipeline.beam.reading.compression import decompressed
from pipeline.beam.reading.reader import ReadSizes, UnitReader
from pipeline.beam.reading.work_units import InputError, WorkUnit, expand_inputs, split_large_inputs

COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
            ".zst": lambda data: zstandard.ZstdCompressor().compress(data)}


def _texts(unit: WorkUnit, sizes: ReadSizes | None = None, column: str = "text") -> tuple[list[str], object]:
    reader = UnitReader(unit, column, keep_boilerplate=True, sizes=sizes)
    scan = reader.scan()
    if scan.skip_reason is not None:
        return [], scan
    return ["".join(pieces) for _, pieces in reader.documents()], scan


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_member_ending_exactly_at_a_block_end_does_not_lose_the_file(tmp_path, suffix):
    """The finished decompressor was fed the next block: EOFError (bz2, xz), 'cannot use a
    decompressobj multiple times' (zstd); the whole file was skipped as unreadable."""
    one, two = b"The first member of the stream.\n" * 300, b"The second member, read as well.\n" * 300
    first = COMPRESS[suffix](one)
    path = tmp_path / f"book.txt{suffix}"
    path.write_bytes(first + COMPRESS[suffix](two) + COMPRESS[suffix](one))
    for sizes in (ReadSizes(compressed_block_bytes=len(first)), ReadSizes(read_bytes=len(first))):
        texts, scan = _texts(expand_inputs([str(path)])[0], sizes)
        assert scan.skip_reason is None and texts == [(one + two + one).decode()], (sizes, scan.skip_reason)


# random.Random(1).randbytes(n) compresses to exactly 65536 bytes (the default block) at these n
EXACT_64K_MEMBER = {".xz": 65472, ".zst": 65526}


@pytest.mark.parametrize("suffix", sorted(EXACT_64K_MEMBER))
def test_a_64k_member_is_read_with_the_default_sizes(suffix):
    data = random.Random(1).randbytes(EXACT_64K_MEMBER[suffix])
    first = COMPRESS[suffix](data)
    assert len(first) == compression.COMPRESSED_BLOCK_BYTES  # the premise: a member ends at a block end
    second = COMPRESS[suffix](b"more\n")
    assert b"".join(decompressed(f"x{suffix}", [first + second])) == data + b"more\n"


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, bytes]:
    """One member each, 16 MiB of one letter (ratio 230x to 120,000x)."""
    data = b"A" * (16 << 20)
    return {".gz": gzip.compress(data, 1), ".bz2": bz2.compress(data, 1), ".xz": lzma.compress(data, preset=0),
            ".zst": zstandard.ZstdCompressor(level=1).compress(data)}


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zst"])
def test_a_decompression_bomb_is_read_in_bounded_memory_and_skipped_past_its_bound(tmp_path, bombs, suffix):
    """A 138-byte .bz2 came out as one 16 MiB block (1 GiB for a 786-byte one): now no call gives
    more than MAX_CALL_OUTPUT (zstd: 128 input bytes), and past the input's bound it is skipped."""
    tracemalloc.start()
    try:
        largest = max(len(block) for block in decompressed(f"x{suffix}", [bombs[suffix]]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert largest <= 4 << 20 and peak < 12 << 20, (largest, peak)
    path = tmp_path / f"bomb.txt{suffix}"
    path.write_bytes(bombs[suffix])
    unit = expand_inputs([str(path)])[0]
    _, scan = _texts(unit, ReadSizes(max_output=1 << 20))
    assert scan.skip_reason.startswith("too large: decompresses to more than 1,048,576 bytes"), scan.skip_reason
    assert compression.output_bound(len(bombs[suffix])) >= compression.MIN_OUTPUT_BOUND


def test_a_huge_jsonl_line_is_a_skipped_record_never_held_whole(tmp_path):
    line = json.dumps({"text": "word " * (1 << 20)})  # 5 MiB
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"text": "before"}) + "\n" + line + "\n" + json.dumps({"text": "after"}) + "\n")
    sizes = ReadSizes(read_bytes=1 << 16, piece_bytes=1 << 16, max_line_bytes=1 << 20)
    tracemalloc.start()
    try:
        texts, scan = _texts(expand_inputs([str(path)])[0], sizes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert texts == ["before", "after"]
    assert scan.records_skipped == {"line longer than 1,048,576 bytes": 1}
    assert peak < 3 << 20, peak


def _range_texts(path, split_bytes: int, sizes: ReadSizes | None = None) -> tuple[list[str], dict[str, int], int]:
    units = split_large_inputs(expand_inputs([str(path)]), split_bytes)
    texts, skipped = [], {}
    for unit in units:
        got, scan = _texts(unit, sizes)
        texts += got
        for reason, n in scan.records_skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    return texts, skipped, len(units)


def test_a_utf16_jsonl_over_split_bytes_keeps_every_record(tmp_path):
    records = [{"text": f"record number {i} about tea"} for i in range(300)]
    path = tmp_path / "records.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\n" for r in records).encode("utf-16"))
    texts, skipped, _ = _range_texts(path, 2000)
    assert texts == [r["text"] for r in records] and not skipped


def test_jsonl_ranges_keep_html_lines_nul_lines_and_lines_ending_at_a_block_end(tmp_path):
    """A range starting with an `<html` line was dropped as an HTML page; a raw NUL dropped the whole
    file; a line straddling a range start whose newline ended a read block lost the range."""
    lines = []
    for i in range(200):
        lines.append(json.dumps({"text": f"record {i} " + "x" * (i % 37)}))
        if i % 50 == 10:
            lines.append("<html><body>not a record</body></html>")
        if i % 50 == 30:
            lines.append('{"text": "a NUL \x00 inside"}')
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "records.jsonl"
    path.write_bytes(data)
    want = [json.loads(line)["text"] for line in lines if line.startswith("{") and "\x00" not in line]
    whole, whole_skipped, _ = _range_texts(path, 1 << 30)
    assert whole == want and whole_skipped == {"line is not valid JSON": 4, "line holds NUL bytes": 4}
    for split_bytes in (997, 1000, 1500):
        starts = range(split_bytes, len(data), split_bytes)
        for read_bytes in {data.index(b"\n", s - 1) + 1 - (s - 1) for s in starts} | {1, 7}:
            texts, skipped, n = _range_texts(path, split_bytes, ReadSizes(read_bytes=read_bytes))
            assert n > 1 and (texts, skipped) == (whole, whole_skipped), (split_bytes, read_bytes)


def test_a_jsonl_without_the_text_column_names_the_wanted_and_the_found_fields(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": "words"}) + "\n" for i in range(5)))
    _, scan = _texts(expand_inputs([str(path)])[0])
    assert "'text'" in scan.skip_reason and "'id', 'body'" in scan.skip_reason, scan.skip_reason


def test_a_folder_is_never_an_input(tmp_path):
    (tmp_path / "empty" / "inner" / "deeper").mkdir(parents=True)
    with pytest.raises(InputError, match="folder holding no file"):
        expand_inputs([str(tmp_path / "empty")])
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a_folder.txt").mkdir()
    (tmp_path / "books" / "a_folder.txt" / "inner.md").write_text("a book")
    (tmp_path / "books" / "b.txt").write_text("a book")
    units = expand_inputs([str(tmp_path / "books" / "*.txt")])
    assert [u.source for u in units] == [str(tmp_path / "books" / "a_folder.txt" / "inner.md"),
                                         str(tmp_path / "books" / "b.txt")]


def test_links_out_of_the_input_folder_are_refused_and_link_loops_end(tmp_path):
    """`in/zz_book.txt -> outside/secret` went into the shards; `a -> .` and `b -> .` made the
    listing recurse forever."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("AWS_SECRET_ACCESS_KEY=do-not-train-on-me\n")
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "book.txt").write_text("A book about tea and time.\n")
    os.symlink(tmp_path / "outside" / "secret", d / "zz_book.txt")
    os.symlink(tmp_path / "outside", d / "sub" / "outside_folder")
    os.symlink(d / "book.txt", d / "sub" / "alias.txt")  # inside the folder: read
    os.symlink(".", d / "a")
    os.symlink(".", d / "b")
    found: list = []
    worker = threading.Thread(target=lambda: found.append(expand_inputs([str(d)])), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert found, "the listing did not end (a link loop)"
    listed = {u.source.rsplit("/", 1)[1]: UnitReader(u, "text", True).scan().skip_reason for u in found[0]}
    assert listed["book.txt"] is None and listed["alias.txt"] is None
    assert listed["zz_book.txt"].startswith("refused: a symbolic link out of the input folder")
    assert listed["outside_folder"].startswith("refused: a symbolic link to a folder out of the input folder")
    assert set(listed) == {"book.txt", "alias.txt", "zz_book.txt", "outside_folder"}
