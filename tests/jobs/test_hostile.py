"""Hostile and odd input: the job completes and accounts for every input."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

from pipeline.consumers.outputs import manifest_with_inputs
from schemas import manifest as m
from tests.conftest import corpus_book, run_preprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    d = root / "in"
    d.mkdir()
    book = (corpus_book("classics__yellow_wallpaper.txt")).read_bytes()
    (d / "book.txt").write_bytes(book)
    (d / "same_book_renamed.txt").write_bytes(book)
    (d / "invalid_utf8.txt").write_bytes(b"Some text \xff\xfe\xc3 more text. " * 200)
    (d / "nul_binary.txt").write_bytes(b"\x00\x01\x02" * 1000)
    (d / "utf16.txt").write_bytes("\ufeffA UTF-16 book about tea and time. ".encode("utf-16-le") * 200)
    (d / "whitespace.txt").write_bytes(b" \n\t\r\n   \n" * 100)
    (d / "scripts.txt").write_text(("Emoji \U0001F600\U0001F680, CJK \u6f22\u5b57\u306e\u6587, RTL \u05e9\u05dc\u05d5\u05dd "
                                    "\u0645\u0631\u062d\u0628\u0627, combining e\u0301 a\u0308 \u1e9b\u0323. ") * 100,
                                   encoding="utf-8")
    (d / "long_word.txt").write_text("x" * 1_000_000 + " and then some words. " * 50)
    with gzip.open(d / "truncated.txt.gz", "wb") as handle:
        handle.write(book)
    data = (d / "truncated.txt.gz").read_bytes()
    (d / "truncated.txt.gz").write_bytes(data[: len(data) // 2])
    os.symlink(d / "does_not_exist.txt", d / "broken_link.txt")
    os.mkfifo(d / "named_pipe.txt")  # unreadable in practice: opening it would block forever
    (d / "a_directory.txt").mkdir()
    (d / "a_directory.txt" / "inner.txt").write_bytes(book[:5000])
    out = root / "out"
    run_preprocess([d / "*.txt", d / "*.gz"], out, "--dedup")
    return d, out


def test_every_input_is_processed_or_skipped_with_a_reason(hostile):
    d, out = hostile
    manifest = manifest_with_inputs(str(out))
    processed = {e[m.KEY_PATH].rsplit("/", 1)[1] for e in manifest[m.KEY_INPUTS]}
    skipped = {s[m.KEY_PATH].rsplit("/", 1)[1]: s[m.KEY_REASON] for s in manifest[m.KEY_SKIPPED]}
    # a folder a glob matches is never an input: its files are (not skipped as an IsADirectoryError)
    assert processed == {"book.txt", "invalid_utf8.txt", "utf16.txt", "inner.txt", "long_word.txt"}
    # mostly [UNK] for bert-base-uncased (emoji, RTL): gated, with the share
    assert skipped["scripts.txt"].startswith("[UNK] gate: ") and "(--max_unk_fraction 0.1)" in skipped["scripts.txt"]
    # a 1 MB word is one [UNK], as the real tokenizer makes it (not 20 KB pieces: 50 [UNK]s, and
    # gated): 1 of its 251 content tokens (the manifest rounds shares to 3 decimals)
    long_word = next(e for e in manifest[m.KEY_INPUTS] if e[m.KEY_PATH].endswith("/long_word.txt"))
    assert long_word[m.KEY_UNK_FRACTION] == pytest.approx(1 / 251, abs=5e-4)
    assert "binary" in skipped["nul_binary.txt"]
    assert skipped["whitespace.txt"].startswith("empty")
    assert "unreadable" in skipped["truncated.txt.gz"]
    assert "duplicate of" in skipped["same_book_renamed.txt"] and "book.txt" in skipped["same_book_renamed.txt"]
    # Beam's listing drops these silently; we report them
    assert "FileNotFoundError" in skipped["broken_link.txt"]
    assert "a_directory.txt" not in skipped
    assert "not a regular file" in skipped["named_pipe.txt"]
    assert manifest[m.KEY_DUPLICATES] == [{m.KEY_PATH: str(d / "same_book_renamed.txt"),
                                           m.KEY_DUPLICATE_OF: str(d / "book.txt")}]
    assert manifest[m.KEY_COUNTS][m.REPLACED_BYTES] == 3 * 200


def test_output_of_hostile_input_validates(hostile, capsys):
    from jobs.validate import run

    assert run([str(hostile[1])]) == 0
    assert capsys.readouterr().out.startswith("OK:")


def test_no_path_is_built_from_input_names(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(corpus_book("classics__yellow_wallpaper.txt"), d / "..%2f..%2fescape.txt")
    out = tmp_path / "out"
    run_preprocess([d], out)
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*")}
    assert written == {"in", "out"}
    assert all("escape" not in p.name for p in out.rglob("*"))
    assert json.loads((out / m.MANIFEST_FILE).read_text())[m.KEY_COUNTS][m.DOCUMENTS] == 1


# Peak RSS of the whole process tree (launcher + 2 workers) on a 128 MB line and a 128 MB gzip
# (of 128 MB of text) at once. Inputs are read in pieces of 8 MB, so it does not grow with their
# size: 680 MB measured with inputs of 300 MB each, and the same bound held there; reading an input
# whole took 1.9-2.5 GB for one 200 MB line (about 1.2-1.6 GB for these 128 MB).
INPUT_MB = 128
PEAK_RSS_BOUND_MB = 1000


def test_128mb_line_and_128mb_gzip_have_bounded_memory(tmp_path):
    import sys

    from benchmarks.procmon import run_measured
    from tests.conftest import REPO, TOKENIZER_DIR

    line = b"lorem ipsum dolor sit amet, consectetur adipiscing elit; sed do eiusmod tempor. " * 16384
    with open(tmp_path / "one_line.txt", "wb") as handle:
        while handle.tell() < INPUT_MB * 2**20:
            handle.write(line)
    paragraph = b"The quick brown fox jumps over the lazy dog near the river bank at dawn.\n\n" * 8192
    with gzip.open(tmp_path / "book.txt.gz", "wb", compresslevel=1) as handle:
        for _ in range(INPUT_MB * 2**20 // len(paragraph)):
            handle.write(paragraph)
    out = tmp_path / "out"
    measured = run_measured([sys.executable, "-m", "jobs.preprocess", "--input", str(tmp_path / "one_line.txt"),
                             "--input", str(tmp_path / "book.txt.gz"), "--output", str(out),
                             "--tokenizer", str(TOKENIZER_DIR), "--masking", "dynamic", "--validation_fraction", "0"],
                            cwd=str(REPO))
    manifest = manifest_with_inputs(str(out))
    assert manifest[m.KEY_COUNTS][m.DOCUMENTS] == 2 and manifest[m.KEY_COUNTS][m.TOKENS] > 40_000_000
    print("peak RSS MB", measured.peak_rss_mb, "wall s", measured.wall_s)
    assert measured.peak_rss_mb < PEAK_RSS_BOUND_MB, measured.peak_rss_mb


def test_a_run_that_makes_no_rows_exits_non_zero_naming_the_reasons(tmp_path, capfd):
    """Whitespace and a .jsonl without the --text_column gave an empty dataset and exit 0. (`main` is
    what `python -m jobs.preprocess` runs.)"""
    from jobs.preprocess import main
    from tests.conftest import TOKENIZER_DIR

    d = tmp_path / "in"
    d.mkdir()
    (d / "whitespace.txt").write_bytes(b" \n\t\r\n   \n" * 10)
    (d / "records.jsonl").write_text("".join(json.dumps({"id": i, "body": "words"}) + "\n" for i in range(3)))
    with pytest.raises(SystemExit) as exit_:
        main(["--input", str(d), "--output", str(tmp_path / "out"), "--tokenizer", str(TOKENIZER_DIR)])
    err = capfd.readouterr().err
    assert exit_.value.code not in (0, None)
    assert "the run made no rows: 2 input(s) skipped" in err, err[-3000:]
    assert "empty: no text after cleaning" in err and "fields found: 'id', 'body'" in err


def test_a_run_that_makes_no_rows_leaves_no_manifest_and_a_folder_a_retry_continues(tmp_path, capfd):
    """It wrote manifest.json: `validate` said OK (2 shards, 0 rows), --resume said complete (exit 0),
    a plain retry was refused; its summary told to raise --validation_fraction 0.05 "e.g. 0.05"."""
    from jobs.preprocess import main
    from jobs.validate import run as validate
    from tests.conftest import TOKENIZER_DIR

    d = tmp_path / "in"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps({"id": i, "body": f"words of record {i}"}) + "\n"
                                             for i in range(40)))
    out = tmp_path / "out"
    argv = ["--input", str(d), "--output", str(out), "--tokenizer", str(TOKENIZER_DIR), "--min_tokens", "2",
            "--validation_fraction", "0.05"]

    def preprocess(*extra: str) -> tuple[int, str]:
        try:
            main(argv + list(extra))
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        return code, capfd.readouterr().err

    code, err = preprocess()
    assert code == 1 and "the run made no rows" in err and "no manifest was written" in err, err[-2000:]
    assert "raise it" not in err and "drew none" not in err, err[-2000:]
    assert "none written (no rows)" in err, err[-2000:]
    assert not (out / m.MANIFEST_FILE).exists() and (out / m.TEMP_DIR / m.NO_ROWS_FILE).is_file()
    assert not (out / m.DATASET_DICT_FILE).exists()
    assert validate([str(out)]) == 1 and "INVALID" in capfd.readouterr().err
    for extra in (["--resume"], []):  # --resume and a plain retry of the same command: the same failure
        code, err = preprocess(*extra)
        assert code == 1 and "the run made no rows" in err and "nothing to do" not in err, (extra, err[-2000:])
        assert "--resume to continue it" not in err, err[-2000:]
        assert not (out / m.MANIFEST_FILE).exists()
    code, err = preprocess("--text_column", "body")  # the fix: a plain retry into the same folder
    assert code == 0, err[-2000:]
    assert "starting over" in err and not (out / m.TEMP_DIR).exists()
    assert validate([str(out)]) == 0
    assert manifest_with_inputs(str(out))[m.KEY_COUNTS][m.DOCUMENTS] == 40
