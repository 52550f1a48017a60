"""What a user sees on the console: progress lines and a summary when stderr is not a terminal,
and none of Beam's or its workers' INFO logs unless --log_level asks for them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from schemas import manifest as m
from tests.conftest import REPO, TOKENIZER_DIR

pytestmark = pytest.mark.slow
PROGRESS = re.compile(r"preprocess: (\d+)/(\d+) inputs, .* of .* read, .*/s, ETA .*, ([\d,]+) rows")


def _preprocess(small_books, out, *extra):
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(small_books), "--output", str(out),
            "--tokenizer", str(TOKENIZER_DIR), "--progress_seconds", "0.05", *extra]
    return subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)


def test_progress_and_summary_without_beam_logs(small_books, tmp_path):
    """Worker processes (the hf backend), whose own stderr is the noisy one."""
    out = tmp_path / "out"
    done = _preprocess(small_books, out, "--tokenizer_backend", "hf")
    assert done.returncode == 0, done.stderr
    err = done.stderr
    progress = [PROGRESS.search(line) for line in err.splitlines() if PROGRESS.search(line)]
    n_inputs = len(list(small_books.iterdir()))
    assert progress, err
    assert all(int(p.group(2)) == n_inputs for p in progress)
    assert [int(p.group(1)) for p in progress] == sorted(int(p.group(1)) for p in progress)
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    counts, splits = manifest[m.KEY_COUNTS], manifest[m.KEY_SPLITS]
    assert int(progress[-1].group(1)) == n_inputs
    assert int(progress[-1].group(3).replace(",", "")) == counts[m.ROWS]
    assert re.search(r"finished in \d+:\d\d: .* of input at .*/s", err)
    assert f"inputs:    {counts[m.FILES_READ]} read, {counts[m.FILES_SKIPPED]} skipped" in err
    assert f"tokens: {counts[m.TOKENS]:,}" in err
    assert f"rows:      train {splits[m.TRAIN][m.KEY_ROWS]:,}, validation {splits[m.VALIDATION][m.KEY_ROWS]:,}" in err
    assert f"manifest:  {out / m.MANIFEST_FILE}" in err
    for noise in ("INFO:", "apitools", "semi_persistent_directory", "sdk_worker", "Traceback"):
        assert noise not in err, f"{noise!r} in:\n{err}"


def test_log_level_info_shows_beam_logs(small_books, tmp_path):
    done = _preprocess(small_books, tmp_path / "out", "--tokenizer_backend", "hf", "--log_level", "INFO")
    assert done.returncode == 0, done.stderr
    assert "apache_beam" in done.stderr and "apitools" in done.stderr


FAILING_RUN = """
import sys
import pipeline.beam.transforms as transforms
real = transforms.process_unit
def failing(unit, *args, **kwargs):
    if unit.source.endswith(sys.argv[1]):
        raise OSError("disk on fire")
    return real(unit, *args, **kwargs)
transforms.process_unit = failing  # worker threads share this process
from jobs.preprocess import main
main(sys.argv[2:])
"""


def test_a_failure_is_reported_once_naming_the_input(small_books, tmp_path):
    victim = sorted(p.name for p in small_books.iterdir())[1]
    argv = [sys.executable, "-c", FAILING_RUN, victim, "--input", str(small_books), "--output", str(tmp_path / "out"),
            "--tokenizer", str(TOKENIZER_DIR), "--tokenizer_backend", "fast", "--direct_running_mode",
            "multi_threading"]
    done = subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1
    err = done.stderr
    assert err.count("disk on fire") == 1, err
    assert f"the run failed: input {small_books / victim}: OSError: disk on fire" in err
    assert "--resume" in err and "Traceback" not in err and "apache_beam" not in err


def test_a_terminal_gets_a_progress_bar(small_books, tmp_path):
    """stderr on a pseudo-terminal: a tqdm bar (carriage returns, a percentage) and the summary."""
    import pty

    leader, follower = pty.openpty()
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(small_books), "--output", str(tmp_path / "out"),
            "--tokenizer", str(TOKENIZER_DIR), "--progress_seconds", "0.05"]
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=300) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\r" in screen and re.search(r"preprocess: +100%\|", screen), screen
    assert "finished in " in screen
