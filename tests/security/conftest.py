"""One small real output per session (a slice of an embedded book, 32-token rows), made with a fake
secret in the environment and on the command line; tests copy it and tamper with the copy."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from pipeline.sample import SAMPLE_BOOKS
from schemas import manifest as m
from tests.conftest import run_preprocess

SECRET = "hf_SECRETfromTHEenvironment0123456789"  # also passed as --s3_secret_access_key
FLAGS = ("--max_seq_length", "32", "--min_tokens", "4", "--validation_fraction", "0.2")  # the tiny output's


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """{"books": input folder, "output": the output, "log": every log line at DEBUG} of one run."""
    base = tmp_path_factory.mktemp("security")
    books = base / "books"
    books.mkdir()
    text = (SAMPLE_BOOKS / "drama__doctor_faustus.txt").read_text(encoding="utf-8-sig")
    (books / "faustus.txt").write_text(text[20_000:26_000], encoding="utf-8")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler, root = Keep(logging.DEBUG), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    old = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = SECRET
    try:
        run_preprocess([books], base / "out", *FLAGS, f"--s3_secret_access_key={SECRET}")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        if old is None:
            del os.environ["HF_TOKEN"]
        else:
            os.environ["HF_TOKEN"] = old
    return {"books": books, "output": base / "out", "log": "\n".join(records)}


def copy_output(tiny: dict, target: Path) -> Path:
    shutil.copytree(tiny["output"], target)
    return target


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / m.MANIFEST_FILE).read_text())


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / m.MANIFEST_FILE).write_text(json.dumps(manifest))


def write_inputs(folder: Path, manifest: dict) -> None:
    """Write the per-input sections of `manifest` (as manifest_with_inputs gives them) as the folder's
    INPUTS_FILE, its record in the manifest describing it, and the manifest (what a forger controls)."""
    manifest = dict(manifest)
    sections = {section: manifest.pop(section, []) for section in m.INPUT_SECTIONS}
    data = "".join(m.input_line(section, entry) for section in m.INPUT_SECTIONS
                   for entry in sections[section]).encode("ascii")
    (folder / m.INPUTS_FILE).write_bytes(data)
    manifest[m.KEY_INPUTS_FILE] = {m.KEY_FILENAME: m.INPUTS_FILE, m.KEY_BYTES: len(data),
                                   m.KEY_SHA256: hashlib.sha256(data).hexdigest(),
                                   m.KEY_LINES: {section: len(sections[section]) for section in m.INPUT_SECTIONS}}
    write_manifest(folder, manifest)


def describe(entry: dict, data: bytes) -> None:
    """Make a manifest shard entry describe `data` (what a forger controls)."""
    entry[m.KEY_BYTES], entry[m.KEY_SHA256] = len(data), hashlib.sha256(data).hexdigest()
