"""Reading a unit in bounded pieces gives the rows of reading it whole; compressed streams are read
to their end, and a truncated one is reported."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest
import zstandard

from pipeline.beam.reading import reader as streams
from pipeline.beam.reading.work_units import expand_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.beam.writing.arrow_io import read_part
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer
from schemas import manifest as m
from schemas.options import PACKING_MODES
from tests.conftest import BOOKS


def _book() -> bytes:
    return b"\n\n".join((BOOKS / name).read_bytes() for name in sorted(p.name for p in BOOKS.glob("*.txt"))[:2])


def _documents(path) -> list[str]:
    reader = streams.UnitReader(expand_inputs([str(path)])[0], "text", keep_boilerplate=False)
    scan = reader.scan()
    assert scan.skip_reason is None, scan.skip_reason
    return ["".join(pieces) for _, pieces in reader.documents()]


def test_concatenated_gzip_members_bzip2_streams_and_zstd_frames_are_all_read(tmp_path):
    one, two = b"The first member of the stream.\n" * 50, b"The second member, read as well.\n" * 50
    files = {"a.txt.gz": gzip.compress(one) + gzip.compress(two), "b.txt.bz2": bz2.compress(one) + bz2.compress(two),
             "c.txt.xz": lzma.compress(one) + lzma.compress(two),
             "d.txt.zst": zstandard.ZstdCompressor().compress(one) + zstandard.ZstdCompressor().compress(two)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        assert _documents(tmp_path / name) == [(one + two).decode()], name


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zst"])
def test_a_truncated_compressed_stream_is_skipped_as_unreadable(tmp_path, suffix):
    compress = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
                ".zst": zstandard.ZstdCompressor().compress}[suffix]
    data = compress(_book())
    path = tmp_path / f"book.txt{suffix}"
    path.write_bytes(data[: len(data) // 2])
    scan = streams.UnitReader(expand_inputs([str(path)])[0], "text", False).scan()
    assert scan.skip_reason.startswith("unreadable: ") and scan.documents == 0


def _parts(unit, spec, config, temp_dir) -> dict[str, tuple]:
    tokenizer = FastTokenizer(build_tokenizer(spec), spec.json)
    result = process_unit(unit, UnitContext.from_spec(spec, config, str(temp_dir), tokenizer))
    out = {}
    for split, (path, rows) in result.parts.items():
        part = read_part(path, config.max_seq_length)
        out[split] = (rows, part.ids.tobytes(), part.lengths.tobytes(), part.seeds.tobytes())
    return out, result


@pytest.mark.parametrize("packing", PACKING_MODES)
def test_rows_from_small_pieces_equal_rows_from_the_whole_input(tmp_path, spec, monkeypatch, packing):
    """Pieces of 4 KB, nothing kept between the passes (a big input's path) against the default
    (the whole book in one piece, kept): the same rows, seeds and splits, the same counts."""
    text = _book()
    (tmp_path / "book.txt.gz").write_bytes(gzip.compress(text))
    records = [{"text": paragraph} for paragraph in text.decode("utf-8", "replace").split("\n\n") if paragraph.strip()]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:400]) + "not json\n")
    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="bert",
                              validation_fraction=0.2, packing=packing)
    for unit in expand_inputs([str(tmp_path / "book.txt.gz"), str(tmp_path / "records.jsonl")]):
        whole, whole_result = _parts(unit, spec, config, tmp_path / "whole")
        with monkeypatch.context() as patch:
            patch.setattr(streams, "PIECE_BYTES", 4096)
            patch.setattr(streams, "CACHE_CHARS", 0)
            pieces, pieces_result = _parts(unit, spec, config, tmp_path / "pieces")
        assert whole and whole.keys() == pieces.keys()
        assert whole == pieces
        assert whole_result.counts == pieces_result.counts and whole_result.key == pieces_result.key
        assert whole_result.signature == pieces_result.signature and whole_result.scripts == pieces_result.scripts
        assert whole_result.counts[m.ROWS] > 10


def test_a_unit_gated_after_tokenizing_leaves_no_part(tmp_path, spec):
    # over ROWS_PER_RECORD_BATCH rows of [UNK]: a part is being written when the gate closes
    (tmp_path / "emoji.txt").write_text("\U0001F600 \U0001F680 " * 300_000 + "a few words " * 100, encoding="utf-8")
    config = PreprocessConfig(inputs=(str(tmp_path),), output=str(tmp_path / "out"), tokenizer="bert")
    _, result = _parts(expand_inputs([str(tmp_path / "emoji.txt")])[0], spec, config, tmp_path / "parts")
    assert result.skip_reason.startswith("[UNK] gate") and result.parts == {}
    assert (tmp_path / "parts").is_dir() and not list((tmp_path / "parts").glob("*.arrow*"))
