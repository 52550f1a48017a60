"""Crash safety and --resume: a real run is killed part-way and resumed to the same bytes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schemas import manifest as m
from tests.conftest import BOOKS, HAVE_CORPUS, REPO, TOKENIZER_DIR, corpus_book, run_preprocess

pytestmark = pytest.mark.slow  # on the shared corpus, else on the embedded sample
ARGS = ["--num_shards", "24", "--dupe_factor", "4", "--validation_fraction", "0.05"]


def _hashes(out):
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def _final_shards(out):
    return [p for p in (out / m.TRAIN).glob("data-*.arrow")] if (out / m.TRAIN).exists() else []


def _start(out, *extra: str, stderr=subprocess.DEVNULL, books: Path = BOOKS) -> subprocess.Popen:
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(books), "--output", str(out),
            "--tokenizer", str(TOKENIZER_DIR), *ARGS, *extra]
    return subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=stderr, text=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "out"
    run_preprocess([BOOKS], out, *ARGS)
    return out


def _same_output(clean, other) -> None:
    """Byte-identical shards and side files; manifests equal but for the output path and backend."""
    expected, got = _hashes(clean), _hashes(other)
    assert {k: v for k, v in got.items() if k != m.MANIFEST_FILE} == \
        {k: v for k, v in expected.items() if k != m.MANIFEST_FILE}
    a = json.loads((clean / m.MANIFEST_FILE).read_text())
    b = json.loads((other / m.MANIFEST_FILE).read_text())
    for key in ("output", "tokenizer_backend"):
        a[m.KEY_CONFIG][key] = b[m.KEY_CONFIG][key]
    assert a == b


def _kill_after_first_shard(out) -> None:
    proc = _start(out)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not _final_shards(out):
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its worker processes, at once
    proc.wait()


def test_killed_run_resumes_to_identical_bytes(tmp_path, clean, caplog):
    killed = tmp_path / "killed"
    _kill_after_first_shard(killed)
    finals = _final_shards(killed)
    assert finals, "no shard was final when the run was killed"
    assert not (killed / m.MANIFEST_FILE).exists(), "the run finished before it could be killed"
    expected = _hashes(clean)
    for shard in finals:  # whatever is under a final name is complete
        assert expected[shard.relative_to(killed).as_posix()] == hashlib.sha256(shard.read_bytes()).hexdigest()
    with caplog.at_level("INFO", logger="maskbeam"):
        run_preprocess([BOOKS], killed, *ARGS, "--resume")
    _same_output(clean, killed)
    # shards are written once every input is done: all inputs are reused, and the shards with a record
    said = re.search(r"--resume: (\d+) of (\d+) inputs reused from the earlier run, 0 to redo; (\d+) finished shards? "
                     r"found", caplog.text)
    assert said and said[1] == said[2] and int(said[3]) <= len(finals), caplog.text


def test_ctrl_c_stops_with_one_line_and_resume_completes(tmp_path, clean, capsys):
    """Ctrl-C as a terminal sends it (to the launcher and every worker process of its group), in
    process mode (the hf backend), once some inputs are done."""
    out = tmp_path / "out"
    proc = _start(out, "--tokenizer_backend", "hf", stderr=subprocess.PIPE)
    deadline = time.time() + 300
    # Once one input is done: on the embedded sample (3 books, one far smaller) the last input often
    # finished between the second's result and the signal (done 3 of 3, 2 runs in 6 on session 20's
    # tree too), leaving nothing to resume.
    while time.time() < deadline and proc.poll() is None and not list((out / m.TEMP_DIR).glob("*-result.json")):
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    last = lines[-1]
    assert last.startswith("interrupted (SIGINT) after "), err
    done = int(last.split(" after ")[1].split(" of ")[0])
    total = int(last.split(" of ")[1].split(" inputs")[0])
    assert 1 <= done < total == len(list(BOOKS.iterdir()))
    assert "rerun the same command with --resume to continue" in last
    assert not (out / m.MANIFEST_FILE).exists()
    # the same command without --resume is refused, and says --resume continues it (in this process: the
    # same argv as the stopped run's)
    with pytest.raises(SystemExit) as refused:
        run_preprocess([BOOKS], out, *ARGS, "--tokenizer_backend", "hf")
    assert refused.value.code == 2 and "--resume to continue it" in capsys.readouterr().err
    # resumed on the other backend (their ids are identical, so a run may switch): the same bytes
    run_preprocess([BOOKS], out, *ARGS, "--tokenizer_backend", "fast", "--resume")
    _same_output(clean, out)


def test_resume_refuses_another_config_and_skips_a_complete_output(tmp_path, capsys):
    out = tmp_path / "out"
    book = corpus_book("classics__yellow_wallpaper.txt")
    with pytest.raises(SystemExit):
        run_preprocess([book], out, "--resume")
    assert "no earlier run" in capsys.readouterr().err
    run_preprocess([book], out, "--seed", "3")
    with pytest.raises(SystemExit):
        run_preprocess([book], out, "--seed", "4", "--resume")
    assert "--seed: was 3, now 4" in capsys.readouterr().err
    before = _hashes(out)
    assert run_preprocess([book], out, "--seed", "3", "--resume") is None
    assert _hashes(out) == before
    shard = out / m.TRAIN / "data-00000-of-00001.arrow"
    shard.write_bytes(shard.read_bytes()[:100])  # damage it: resume rebuilds only what does not check out
    run_preprocess([book], out, "--seed", "3", "--resume")
    assert _hashes(out) == before


def test_sigterm_to_the_launcher_stops_its_workers(tmp_path):
    """A scheduler's `kill PID` reaches only the launcher: it must take its worker processes down."""
    out, books, workers = tmp_path / "out", BOOKS, []
    if not HAVE_CORPUS:  # the sample's 3 books: a job under 16 MB runs in the launcher, and ends at once
        books, workers = tmp_path / "books", ["--direct_running_mode", "multi_processing"]
        books.mkdir()
        for i in range(8):
            for book in sorted(BOOKS.glob("*.txt")):
                (books / f"{i}-{book.name}").write_bytes(f"Copy {i}.\n\n".encode() + book.read_bytes())
    proc = _start(out, "--tokenizer_backend", "hf", *workers, stderr=subprocess.PIPE, books=books)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not list((out / m.TEMP_DIR).glob("*-result.json")):
        time.sleep(0.01)
    children = [int(p) for task in Path(f"/proc/{proc.pid}/task").iterdir()
                for p in (task / "children").read_text().split()]  # worker processes start from another thread
    assert proc.poll() is None and children, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # 128 + SIGTERM, as jobs.train exits (130 is SIGINT's)
    assert err.strip().splitlines()[-1].startswith("interrupted (SIGTERM) after "), err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()], "worker processes outlived it"


def test_resume_on_a_complete_output_notices_changed_inputs(tmp_path, small_books, capsys):
    books, out = tmp_path / "books", tmp_path / "out"
    books.mkdir()
    names = sorted(p.name for p in small_books.iterdir())[:2]
    for name in names:
        (books / name).write_bytes((small_books / name).read_bytes())
    run_preprocess([books], out)
    assert run_preprocess([books], out, "--resume") is None  # complete, nothing changed
    with open(books / names[0], "ab") as handle:
        handle.write(b"\nOne more paragraph that arrived after the run.\n")
    (books / "late_arrival.txt").write_bytes((small_books / names[1]).read_bytes())
    with pytest.raises(SystemExit):
        run_preprocess([books], out, "--resume")
    err = capsys.readouterr().err
    assert "is complete, but its inputs changed since it was made" in err
    assert f"new (1): {books / 'late_arrival.txt'}" in err and f"changed (1): {books / names[0]}" in err
    assert "--overwrite" in err


def test_a_run_of_many_small_inputs_killed_midway_resumes_exactly_to_identical_bytes(tmp_path, caplog):
    """600 small files in groups of 5 (one record file a group): killed once a few groups are done, the
    resumed run reuses exactly the inputs of the group records the killed one left and makes the same
    bytes as a run never stopped."""
    from benchmarks.many_files import _words, file_text

    books = tmp_path / "in"
    books.mkdir()
    words = _words()
    for i in range(600):
        (books / f"doc{i:04d}.txt").write_text(file_text(i, words)[:1200], encoding="utf-8")
    args = ["--group_inputs", "5", "--max_seq_length", "64", "--validation_fraction", "0.1"]
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    run_preprocess([books], clean, *args, tokenizer=TOKENIZER_DIR)
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(books), "--output", str(killed),
            "--tokenizer", str(TOKENIZER_DIR), *args]
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(list(
            (killed / m.TEMP_DIR).glob("*-group-result.json"))) < 3:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    records = list((killed / m.TEMP_DIR).glob("*-group-result.json"))
    assert not (killed / m.MANIFEST_FILE).exists() and 3 <= len(records) < 120, len(records)
    with caplog.at_level("INFO", logger="maskbeam"):
        run_preprocess([books], killed, *args, "--resume", tokenizer=TOKENIZER_DIR)
    said = re.search(r"--resume: (\d+) of (\d+) inputs reused from the earlier run, (\d+) to redo", caplog.text)
    assert said and (int(said[1]), int(said[2])) == (5 * len(records), 600), caplog.text
    _same_output(clean, killed)
