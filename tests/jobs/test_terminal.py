"""The console under stress, without a pipeline run: a console that goes away (`2>&1 | head`), worker
processes that outlive the run, tracebacks of the launcher, escape sequences in what is logged, and
Ctrl-C or SIGTERM while the job is still importing. Each case runs a small script in a child process
(real file descriptors, real signals); the pseudo-terminal ones read the screen a user would see."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

from tests.conftest import REPO

ENV = dict(os.environ, PYTHONPATH=str(REPO))

PRELUDE = """
import logging, subprocess, sys, threading
from pipeline.console import setup_logging, quiet_worker_output
setup_logging()
log = logging.getLogger("maskbeam.test")
"""
# A stand-in for an SDK worker process: the lines Beam's workers print on their inherited stderr.
WORKER = ("import sys; sys.stderr.write('INFO:apache_beam.runners.worker.sdk_worker:Control channel established.\\n'"
          " * {n} + 'Traceback (most recent call last):\\n  File \"x.py\", line 1\\nKeyboardInterrupt\\n'"
          " + {extra!r}); sys.stderr.flush()")


def _script(body: str) -> list[str]:
    return [sys.executable, "-c", PRELUDE + body]


def test_a_console_that_goes_away_never_blocks_the_job(tmp_path):
    """`... 2>&1 | head -1`: the reader leaves after one line; the job goes on writing 300 KB of logs
    and worker output and must finish its work (it hung once a filter thread died on the closed pipe)."""
    done = tmp_path / "done"
    body = f"""
log.info("first line")
with quiet_worker_output() as workers:
    for i in range(3000):
        log.info("line %d %s", i, "x" * 100)
    subprocess.run([sys.executable, "-c", {WORKER.format(n=3000, extra="")!r}])
    if workers is not None:
        workers.report(log, failed=False)
log.info("after the run")
open({str(done)!r}, "w").write("finished")
"""
    proc = subprocess.Popen(_script(body), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first = proc.stdout.readline()
    proc.stdout.close()  # like `head -1`
    assert b"first line" in first
    assert proc.wait(timeout=60) in (0, 1, 120)  # 120: Python could not flush stdout at exit
    assert done.read_text() == "finished"


def test_launcher_tracebacks_reach_the_console_and_worker_noise_does_not(tmp_path):
    worker = WORKER.format(n=5, extra="Fatal Python error: worker crashed\n")
    body = f"""
with quiet_worker_output() as workers:
    try:
        raise OSError("launcher trouble")
    except OSError:
        log.exception("the launcher caught")
    t = threading.Thread(target=lambda: 1 / 0, name="launcher-thread")
    t.start(); t.join()
    subprocess.run([sys.executable, "-c", {worker!r}])
    workers.report(log, failed=True)
print("path", workers.path)
"""
    done = subprocess.run(_script(body), env=ENV, capture_output=True, text=True, timeout=60)
    err = done.stderr
    assert "the launcher caught" in err and "OSError: launcher trouble" in err
    assert err.count("Traceback (most recent call last)") == 2, err  # log.exception's and the thread's
    assert "ZeroDivisionError" in err
    assert "worker output: Fatal Python error: worker crashed" in err
    assert "Control channel" not in err and "KeyboardInterrupt" not in err
    kept = done.stdout.split("path ", 1)[1].strip()
    assert f"the worker processes' own output is in {kept}" in err  # kept for a failed run
    assert "Control channel established" in open(kept).read()
    os.remove(kept)


def test_a_worker_that_outlives_the_run_writes_nowhere_else(tmp_path):
    """A worker still writing after the run ends: its lines stay in its own file, never in a file
    the launcher opens next (a closed descriptor number handed out again) nor on the console."""
    later = tmp_path / "later.txt"
    body = f"""
with quiet_worker_output() as workers:
    leftover = subprocess.Popen([sys.executable, "-c",
        "import sys, time\\nfor _ in range(30):\\n    time.sleep(0.1); sys.stderr.write('LEFTOVER\\\\n'); sys.stderr.flush()"])

    import time; time.sleep(0.3)
f = open({str(later)!r}, "w")
f.write("mine\\n"); f.flush()
leftover.wait()
f.close()
log.info("done")
if workers is not None:
    import os; os.remove(workers.path)
"""
    done = subprocess.run(_script(body), env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert later.read_text() == "mine\n"
    assert "LEFTOVER" not in done.stderr and "done" in done.stderr


def test_escape_sequences_in_logged_names_are_made_visible():
    body = r"""
log.warning("skipped %s: %s", "in/book\x1b]0;pwned\x07.txt", "reason \x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\")
"""
    done = subprocess.run(_script(body), env=ENV, capture_output=True, text=True, timeout=60)
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "in/book\\x1b]0;pwned\\x07.txt" in done.stderr and "\\x1b]8;;http://evil" in done.stderr


def _screen_of(argv: list[str], signum: int, after: str = "", delay: float = 0.0,
               timeout: float = 120) -> tuple[int, str]:
    """Run `argv` on a pseudo-terminal in its own session; `delay` seconds after `after` appears on the
    screen, send `signum` to the whole foreground process group, as a terminal's Ctrl-C does."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, env=ENV, stdin=follower, stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    seen_at = None
    screen, sent, deadline = b"", False, time.time() + timeout
    while time.time() < deadline:
        if seen_at is None and after.encode() in screen:
            seen_at = time.time()
        if not sent and seen_at is not None and time.time() - seen_at >= delay:
            os.killpg(proc.pid, signum)
            sent = True
        ready, _, _ = select.select([leader], [], [], 0.02)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
    os.close(leader)
    if proc.poll() is None:
        proc.kill()
    return proc.wait(timeout=30), screen.decode("utf-8", "replace")


def test_ctrl_c_and_sigterm_while_importing_print_one_line(tmp_path):
    """Right after the job starts it is still importing Beam (a second or more): a Ctrl-C printed an
    import traceback and a SIGTERM killed it silently. Now either prints one line and exits as a shell
    reports the signal: 130 after SIGINT, 143 after SIGTERM (schedulers read 130 as a Ctrl-C).
    The signal goes 0.2 s after `main` is called (the child says `go` just before); Beam takes longer."""
    for signum, name, exit_status in ((signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)):
        code = (f"import sys; from jobs.preprocess import main; sys.stderr.write('go\\n'); sys.stderr.flush(); "
                f"main(['--output', {str(tmp_path / name)!r}])")
        status, screen = _screen_of([sys.executable, "-c", code], signum, after="go", delay=0.2)
        assert status == exit_status, screen
        lines = [line for line in screen.replace("\r", "").splitlines() if line.strip()]
        assert lines[-1] == f"interrupted ({name}) before any input was processed", screen
        assert "Traceback" not in screen and "KeyboardInterrupt" not in screen, screen
        assert not (tmp_path / name).exists()


def test_a_caller_of_main_gets_its_signals_back():
    """`run_main` blocks SIGINT/SIGTERM and ignores SIGINT while a job runs; a caller that goes on (a
    test, a script calling `main()`) must get them back, or every process it starts later inherits
    them (a Ctrl-C test run after an in-process job saw its child ignore SIGINT)."""
    import pytest

    from pipeline.console import run_main

    def raises() -> None:
        raise ValueError("a bad option")

    before = signal.getsignal(signal.SIGINT)
    assert run_main(lambda: 42) == 42
    with pytest.raises(ValueError, match="a bad option"):
        run_main(raises)
    assert signal.getsignal(signal.SIGINT) is before
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.SIGINT not in blocked and signal.SIGTERM not in blocked


def test_a_beam_thread_failing_in_this_process_is_worker_output_not_a_console_traceback(tmp_path):
    """With --direct_running_mode multi_threading Beam's SDK worker threads run in the launcher and may
    fail as a run is torn down after the failure the job reports once (`KeyError: 'bundle_12'` from
    sdk_worker.py reached the console in the full suite); our own threads' crashes still show."""
    body = """
from apache_beam.utils.timestamp import Timestamp
with quiet_worker_output() as workers:
    t = threading.Thread(target=lambda: Timestamp.of(object()), name="beam-like")
    t.start(); t.join()
    t = threading.Thread(target=lambda: 1 / 0, name="ours")
    t.start(); t.join()
    workers.report(log, failed=True)
print("path", workers.path)
"""
    done = subprocess.run(_script(body), env=ENV, capture_output=True, text=True, timeout=60)
    err = done.stderr
    assert "ZeroDivisionError" in err and err.count("Traceback (most recent call last)") == 1, err
    assert "TypeError" not in err
    kept = done.stdout.split("path ", 1)[1].strip()
    assert "TypeError" in open(kept).read()
    os.remove(kept)
