"""A trained tokenizer round-trips through the preprocess job and transformers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from pipeline.consumers.outputs import load_manifest, manifest_with_inputs
from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.sample import SAMPLE_BOOKS
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from tests.conftest import HTML_PAGES, REPO, TOKENIZER_DIR, corpus_book, run_preprocess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind, cls_token", [("wordpiece", "[CLS]"), ("bpe", "<s>")])
def test_trained_tokenizer_round_trips(small_books, tmp_path, kind, cls_token, caplog):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from jobs.train_tokenizer import run

    out = tmp_path / "tok"
    with caplog.at_level("INFO", logger="maskbeam"):
        run(["--input", str(small_books), "--output", str(out), "--vocab_size", "3000", "--kind", kind])
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(out)))
    assert f"saved to {out}" in caplog.text and f"--tokenizer {out}" in caplog.text
    assert 2000 < spec.vocab_size <= 3000
    assert spec.cls_id == spec.special_ids[spec.special_ids.index(spec.cls_id)]
    assert len(spec.continuation_ids) > 100  # word boundaries are known for whole-word masking
    hf = AutoTokenizer.from_pretrained(str(out))
    assert isinstance(hf, PreTrainedTokenizerFast) and hf.cls_token == cls_token
    text = clean_bytes((corpus_book("drama__doctor_faustus.txt")).read_bytes()).text[:20000]
    ours = tokenize_text(build_tokenizer(spec), text)
    if kind == "wordpiece":  # byte-level BPE marks spaces in the token, so paragraph pieces differ there
        np.testing.assert_array_equal(ours, hf(text, add_special_tokens=False)["input_ids"])
    assert hf(text)["input_ids"][0] == spec.cls_id
    data = tmp_path / "data"
    run_preprocess([small_books], data, "--whole_word_mask", "--max_seq_length", "128", tokenizer=out)
    manifest = load_manifest(str(data))
    assert manifest[m.KEY_TOKENIZER][m.KEY_VOCAB_SIZE] == spec.vocab_size
    # trained on the inputs preprocess reads (the HTML page among the corpus books is skipped by both;
    # the embedded sample has none)
    used = manifest[m.KEY_COUNTS][m.FILES_READ] - manifest[m.KEY_COUNTS][m.FILES_SKIPPED]
    books = sorted(p.name for p in small_books.iterdir())
    assert used == len(books) - len(set(books) & set(HTML_PAGES)), (used, books)
    assert re.search(rf"trained an uncased {kind} tokenizer of {spec.vocab_size} ids \(asked 3000\) on {used} "
                     rf"inputs, [\d.]+ [KM]B of text, in \d+:\d\d", caplog.text), caplog.text
    assert manifest[m.KEY_COUNTS][m.ROWS] > 100


def _train(*argv: str) -> subprocess.CompletedProcess:
    """The job as a user runs it, stderr a pipe (not a terminal)."""
    return subprocess.run([sys.executable, "-m", "jobs.train_tokenizer", "--vocab_size", "300", *argv],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)


def _folder_bytes(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_output_is_refused_unless_overwrite_replaces_an_earlier_output_of_the_job(tmp_path, one_book, capsys):
    """A real tokenizer folder (tokenizer.json and a 30,522-line vocab.txt) was overwritten in place,
    and a rerun into the same folder replaced the earlier tokenizer without a word."""
    from jobs.train_tokenizer import run

    def train(*argv: str) -> str:
        return run(["--vocab_size", "300", *argv])

    foreign = tmp_path / "bert"
    shutil.copytree(TOKENIZER_DIR, foreign)
    (foreign / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(30522)))
    preprocessed = tmp_path / "data"
    shutil.copytree(one_book, preprocessed)
    for folder in (foreign, preprocessed):
        before = _folder_bytes(folder)
        for extra in ([], ["--overwrite"]):
            with pytest.raises(SystemExit) as refused:
                train("--input", str(SAMPLE_BOOKS), "--output", str(folder), *extra)
            err = capsys.readouterr().err
            assert refused.value.code == 2 and len(err.strip().splitlines()) == 1, err
            assert "is not a train_tokenizer output" in err and "choose another --output" in err, err
        assert _folder_bytes(folder) == before
    ours = tmp_path / "tok"
    train("--input", str(SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"), "--output", str(ours))
    first = _folder_bytes(ours)
    with pytest.raises(SystemExit):
        train("--input", str(SAMPLE_BOOKS), "--output", str(ours))
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert _folder_bytes(ours) == first
    (ours / "notes.txt").write_text("mine")
    (ours / "tokenizer.json").rename(ours / "tokenizer.json.bak")  # a user's file the run file does not name
    (ours / "tokenizer.json").write_bytes(first["tokenizer.json"])
    train("--input", str(SAMPLE_BOOKS), "--output", str(ours), "--overwrite")
    now = _folder_bytes(ours)
    assert now["notes.txt"] == b"mine" and now["tokenizer.json.bak"] == first["tokenizer.json"]
    assert now["tokenizer.json"] != first["tokenizer.json"]  # trained on 3 books, not 1
    record = json.loads(now[m.TOKENIZER_RUN_FILE])
    assert set(record[m.KEY_FILES]) | {m.TOKENIZER_RUN_FILE, "notes.txt", "tokenizer.json.bak"} == set(now)


def _pdf_and_zip(folder) -> None:
    (folder / "paper.pdf").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nstream\x00\x01")
    with zipfile.ZipFile(folder / "books.zip", "w") as archive:
        archive.writestr("book.txt", "It was a dark and stormy night. " * 200)


def test_inputs_are_listed_counted_and_skipped_as_preprocess_does(tmp_path, one_book):
    """'on 14 inputs' for 5 books plus a MaskBeam output (preprocess leaves the output out), 'on 50
    inputs' with 3 skipped and never named, and 3 blank lines when stderr is not a terminal."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("classics__yellow_wallpaper.txt", "drama__doctor_faustus.txt"):
        shutil.copy(SAMPLE_BOOKS / name, books / name)
    _pdf_and_zip(books)
    shutil.copytree(one_book, books / "processed")
    output_files = sum(1 for p in (books / "processed").rglob("*") if p.is_file())
    done = _train("--input", str(books), "--output", str(tmp_path / "tok"))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(line.strip() for line in lines), f"blank lines on a non-terminal stderr:\n{done.stderr}"
    text = "\n".join(lines)
    assert f"left out {output_files} files of the MaskBeam output {books / 'processed'}" in text, text
    assert re.search(r"tokenizer of \d+ ids \(asked 300\) on 2 inputs, ", text), text
    assert "inputs:    4 read, 2 skipped (1 not text: a PDF document" in text, text
    assert re.search(r"skipped \(not text: a PDF document [^)]*\)\): paper\.pdf", text), text
    assert re.search(r"skipped \(not text: a zip archive: unpack it[^)]*\): books\.zip", text), text
    record = json.loads((tmp_path / "tok" / m.TOKENIZER_RUN_FILE).read_text())
    # preprocess on the same folder: the same inputs read, the same ones skipped for the same reasons
    run_preprocess([books], tmp_path / "data", "--max_seq_length", "64")
    manifest = manifest_with_inputs(str(tmp_path / "data"))
    assert [(e[m.KEY_PATH], e[m.KEY_REASON]) for e in manifest[m.KEY_SKIPPED]] == \
        [(e[m.KEY_PATH], e[m.KEY_REASON]) for e in record[m.KEY_SKIPPED]]
    assert manifest[m.KEY_COUNTS][m.FILES_READ] == record[m.KEY_COUNTS][m.FILES_READ] == 4
    assert manifest[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON] == record[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON]


def test_no_input_with_text_is_an_error_that_writes_nothing(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _pdf_and_zip(folder)
    done = _train("--input", str(folder), "--output", str(tmp_path / "tok"))
    assert done.returncode == 1 and "no input has text to train on (2 inputs read, all skipped)" in done.stderr
    assert "paper.pdf" in done.stderr and not (tmp_path / "tok").exists()


def test_an_input_that_is_only_a_maskbeam_output_is_refused(tmp_path, one_book, capsys):
    from jobs.train_tokenizer import run

    with pytest.raises(SystemExit) as refused:
        run(["--input", str(one_book), "--output", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and f"--input '{one_book}' names only files of MaskBeam outputs" in err, err
    assert not (tmp_path / "tok").exists()


@pytest.mark.parametrize("named", ["../victim.txt", "/tmp/victim.txt", "sub/../../victim.txt", ".."])
def test_a_crafted_run_file_never_deletes_outside_the_folder(tmp_path, capsys, named):
    from jobs.train_tokenizer import run

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / m.TOKENIZER_RUN_FILE).write_text(json.dumps({m.KEY_TOKENIZER_RUN: 1, m.KEY_PACKAGE_VERSION: "0",
                                                           m.KEY_FILES: ["tokenizer.json", named]}))
    with pytest.raises(SystemExit):
        run(["--input", str(SAMPLE_BOOKS), "--output", str(folder), "--overwrite", "--vocab_size", "300"])
    assert "is not a train_tokenizer output" in capsys.readouterr().err
    assert victim.read_text() == "keep" and (folder / m.TOKENIZER_RUN_FILE).exists()
