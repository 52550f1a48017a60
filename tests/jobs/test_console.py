"""What a user sees on the console: progress lines and a summary when stderr is not a terminal,
and none of Beam's or its workers' INFO logs unless --log_level asks for them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import datasets
import pytest

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from schemas import manifest as m
from tests.conftest import REPO, TOKENIZER_DIR

pytestmark = pytest.mark.slow
PROGRESS = re.compile(r"preprocess: (\d+)/(\d+) inputs?, .* of .* read, .*/s, ETA [^,]*, ([\d,]+) rows?"
                      r"(?:, (\d+ shards?) written)?")


def _preprocess(books, out, *extra):
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(books), "--output", str(out),
            "--tokenizer", str(SAMPLE_TOKENIZER), "--progress_seconds", "0.05", *extra]
    return subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)


EMPTY = "empty\x1b]8;;https:evil.example\x07.txt"  # an OSC 8 hyperlink in a file name
EMPTY_SHOWN = "empty\\x1b]8;;https:evil.example\\x07.txt"


def _inputs_with_an_empty_file(tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / EMPTY).write_bytes(b"")
    folder = tmp_path / "hf"
    datasets.Dataset.from_dict({"text": [f"Row {i}: " + "words in a sentence. " * 60 for i in range(8)]}) \
        .save_to_disk(str(folder))
    return extra, folder


def test_progress_and_summary_without_beam_logs(tmp_path, capsys):
    """Worker processes (the hf backend), whose own stderr is the noisy one; files, an empty file and a
    --hf_dataset counted alike by the progress and the summary; the closing progress line once, with
    the summary's shard count; warnings before the summary; skipped inputs named."""
    out = tmp_path / "out"
    small_books = SAMPLE_BOOKS  # what is said about the run does not depend on which books
    extra, folder = _inputs_with_an_empty_file(tmp_path)
    done = _preprocess(small_books, out, "--tokenizer_backend", "hf", "--input", str(extra), "--hf_dataset",
                       str(folder))
    assert done.returncode == 0, done.stderr
    err = done.stderr
    progress = [PROGRESS.search(line) for line in err.splitlines() if PROGRESS.search(line)]
    n_files = len(list(small_books.iterdir())) + 1
    assert progress, err
    assert all(int(p.group(2)) == n_files + 1 for p in progress)  # the --hf_dataset is one input
    assert [int(p.group(1)) for p in progress] == sorted(int(p.group(1)) for p in progress)
    figures = [(p.group(1), p.group(3), p.group(4)) for p in progress]
    assert all(a != b for a, b in zip(figures, figures[1:])), f"a progress line repeated:\n{err}"
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    counts, splits = manifest[m.KEY_COUNTS], manifest[m.KEY_SPLITS]
    assert int(progress[-1].group(1)) == n_files + 1
    assert int(progress[-1].group(3).replace(",", "")) == counts[m.ROWS]
    shards = sum(len(info[m.KEY_SHARDS]) for info in splits.values())
    assert progress[-1].group(4) == f"{shards} shards", err
    assert re.search(r"finished in \d+:\d\d: .* of input at .*/s", err)
    assert (f"inputs:    {counts[m.FILES_READ] + 1} read ({n_files} files and --hf_dataset {folder}), "
            f"{counts[m.FILES_SKIPPED]} skipped (") in err
    assert re.search(r"\n\S+ INFO     skipped \(empty[^)]*\): " + re.escape(EMPTY_SHOWN) + "\n", err), err
    assert "\x1b" not in err
    assert f"tokens: {counts[m.TOKENS]:,}" in err
    assert f"rows:      train {splits[m.TRAIN][m.KEY_ROWS]:,}, validation {splits[m.VALIDATION][m.KEY_ROWS]:,}" in err
    assert f"manifest:  {out / m.MANIFEST_FILE}" in err
    assert err.rstrip().endswith(f"manifest:  {out / m.MANIFEST_FILE}"), "the summary ends the run"
    for noise in ("INFO:", "apitools", "semi_persistent_directory", "sdk_worker", "Traceback", " 1 inputs",
                  " 1 duplicates", " 1 shards", " 1 rows"):
        assert noise not in err, f"{noise!r} in:\n{err}"
    from jobs.inspect_output import run as inspect

    capsys.readouterr()
    inspect([str(out), "--rows", "1"])
    shown = capsys.readouterr().out
    assert f"{EMPTY_SHOWN}: empty" in shown and "\x1b" not in shown  # inspect_output escapes names too


def test_log_level_info_shows_beam_logs(tmp_path):
    book = sorted(SAMPLE_BOOKS.glob("*.txt"))[0]  # one small book: only the logs matter here
    done = _preprocess(book, tmp_path / "out", "--tokenizer_backend", "hf", "--log_level", "INFO",
                       "--direct_running_mode", "multi_processing")  # worker processes' logs too (not one in-process)
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


def test_a_failure_is_reported_once_naming_the_input(tmp_path):
    small_books = SAMPLE_BOOKS
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


def _on_a_terminal(argv, *, until=None, then=None, timeout=300, env=None):
    """Run `argv` with stdin, stdout and stderr on a 100-column pseudo-terminal in a session of its own;
    `then(proc, screen)` is called once `until` appears on the screen. Returns (exit status, screen)."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})), stdin=follower, stdout=follower,
                            stderr=follower, start_new_session=True)
    os.close(follower)
    screen, deadline = b"", time.time() + timeout
    while time.time() < deadline:
        if until is not None and until.encode() in screen:
            then(proc, screen)
            until = None
        ready, _, _ = select.select([leader], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    if proc.poll() is None:
        proc.kill()
    return proc.wait(timeout=60), screen.decode("utf-8", "replace")


def test_a_terminal_gets_a_progress_bar_and_lines_that_never_share_it(tmp_path):
    """The embedded sample plus an empty file whose name carries an OSC title sequence: a tqdm bar, every
    log line at the start of a line of its own (not glued to the bar), the name shown escaped, and the
    summary last."""
    books = tmp_path / "books"
    shutil.copytree(SAMPLE_BOOKS, books)
    (books / "t\x1b]0;pwned\x07.txt").write_bytes(b"")
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(books), "--output", str(tmp_path / "out"),
            "--tokenizer", str(SAMPLE_TOKENIZER)]
    code, screen = _on_a_terminal(argv)
    assert code == 0, screen
    assert "\r" in screen and re.search(r"preprocess: +100%\|", screen), screen
    stamps = list(re.finditer(r"\d\d:\d\d:\d\d (?:INFO|WARNING) ", screen))
    assert len(stamps) >= 8
    glued = [screen[max(0, s.start() - 60):s.end()] for s in stamps if s.start() and screen[s.start() - 1] not in "\r\n"]
    assert not glued, f"log lines glued to the bar: {glued}"
    assert "\x1b]" not in screen and "\x07" not in screen, "a terminal escape from a file name reached the terminal"
    assert re.search(r"skipped \(empty[^)]*\): t\\x1b\]0;pwned\\x07\.txt", screen), screen
    # (a library resets the colours at exit: "\x1b[0m", harmless)
    assert screen.replace("\r", "").replace("\x1b[0m", "").rstrip().splitlines()[-1].endswith(f"manifest:  {tmp_path / 'out' / m.MANIFEST_FILE}")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_while_the_workers_start_prints_one_line(tmp_path):
    """Worker processes (the hf backend) ignore the terminal's Ctrl-C, sent to the whole process group: they
    printed 30-60 KeyboardInterrupt tracebacks when it came as they started. The launcher stops them and
    prints one line."""
    seen: dict = {}

    def interrupt(proc, screen):
        deadline = time.time() + 60
        while time.time() < deadline and not seen.get("workers"):
            seen["workers"] = [p for p in _descendants(proc.pid) if os.path.exists(f"/proc/{p}")]
            time.sleep(0.05)
        seen["ignoring"] = [_ignores_sigint(p) for p in seen["workers"]]
        os.killpg(proc.pid, signal.SIGINT)

    # worker processes asked for: a job this small otherwise runs on one in-process worker
    argv = [sys.executable, "-m", "jobs.preprocess", "--output", str(tmp_path / "out"), "--tokenizer_backend", "hf",
            "--direct_running_mode", "multi_processing"]
    temp = tmp_path / "temp"  # the run's own temp folder: other tests' runs (other workers) use the shared one
    temp.mkdir()
    code, screen = _on_a_terminal(argv, until="runner: ", then=interrupt, env={"TMPDIR": str(temp)})
    assert not list(temp.glob("maskbeam-workers-*.log"))  # none left behind
    assert seen["workers"] and all(seen["ignoring"]), seen
    assert code == 130, screen
    lines = [line for line in screen.replace("\r", "\n").splitlines() if line.strip()]
    assert re.fullmatch(r"interrupted \(SIGINT\) after 0 of 3 inputs; rerun the same command with --resume to "
                        r"continue", lines[-1]), screen
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen, screen
    assert not any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"
                   for p in seen["workers"])
