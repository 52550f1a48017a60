"""A job stopped and continued (SIGSTOP/SIGCONT: a shell's Ctrl-Z and `fg`, a scheduler's suspend, a
profiler attaching) goes on to its end: its signal wait must not take the wake-up for a Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

_SCRIPT = """
import sys, time
from pipeline.console.interrupt import run_interruptible, run_main

def busy():
    started = time.time()
    while time.time() - started < 1.2:
        sum(range(1000))
    return "done"

print({fn}(busy), flush=True)
"""


@pytest.mark.parametrize("fn", ["run_main", "run_interruptible"])
def test_a_stopped_and_continued_job_finishes_with_status_0(fn):
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT.format(fn=fn)], env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)  # past the imports: in the signal wait
    for _ in range(10):  # one wake-up in a wait made a bad siginfo in about two of three tries here
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.02)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.03)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip()) == (0, "done"), err
