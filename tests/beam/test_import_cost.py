"""The preprocess launcher's fixed costs: what it imports (Beam without pandas, and never torch,
transformers or datasets: each is tenths of a CPU-second of every job's fixed cost, or more), and
its end (the command line leaves without the interpreter's teardown)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "bson", "pymongo", "torch", "transformers", "datasets", "scipy.linalg")
_LAUNCHER = f"""
import sys
import jobs.preprocess
from pipeline.beam.run import job
from pipeline.beam import transforms
import apache_beam
loaded = sorted(name for name in {HEAVY!r} if name in sys.modules)
import pandas, pymongo  # still importable once Beam is in
print(loaded, pandas.DataFrame({{"a": [1]}}).shape, pymongo.ASCENDING)
"""


def test_the_launcher_imports_beam_without_pandas_and_no_heavy_library():
    done = subprocess.run([sys.executable, "-c", _LAUNCHER], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[] (1, 1) 1", done.stdout


_ENTRY_POINT = """
import atexit, sys, threading, time
from jobs.preprocess import exit_without_teardown


class Teardown:
    def __del__(self):  # run by the interpreter's teardown of this module, never by exit_without_teardown
        sys.stdout.write("teardown\\n")
        sys.stdout.flush()


kept = Teardown()
atexit.register(lambda: sys.stdout.write("atexit\\n"))


def late():
    time.sleep(0.3)
    sys.stdout.write("thread\\n")


def entry():
    threading.Thread(target=late).start()  # not a daemon: waited for, as at any exit
    sys.stdout.write("buffered\\n")  # stdout is a pipe: block-buffered, flushed on the way out
    code = sys.argv[1]
    raise SystemExit(int(code) if code.isdigit() else None if code == "none" else code)


exit_without_teardown(entry)
"""


@pytest.mark.parametrize("code, status, stderr", [("3", 3, ""), ("none", 0, ""), ("no rows made", 1, "no rows made\n")])
def test_the_command_line_ends_as_sys_exit_does_without_the_teardown(code, status, stderr):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", _ENTRY_POINT, code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (status, "buffered\nthread\natexit\n", stderr)


_CONSOLE = """
import sys
from jobs.cli import console


class Teardown:
    def __del__(self):  # run by the interpreter's teardown, never by exit_without_teardown
        sys.stdout.write("teardown\\n")


kept = Teardown()
sys.argv = ["maskbeam", *sys.argv[1:]]
console()
"""


@pytest.mark.parametrize("job, torn_down", [("preprocess", False), ("validate", True)])
def test_the_console_script_ends_preprocess_without_the_teardown(job, torn_down):
    """`maskbeam preprocess` (the console script `jobs.cli:console`) skips the teardown as `python -m
    jobs.preprocess` does; the other jobs end the ordinary way."""
    import configparser

    scripts = configparser.ConfigParser()
    scripts.read(REPO / "setup.cfg")
    assert "jobs.cli:console" in scripts["options.entry_points"]["console_scripts"]
    done = subprocess.run([sys.executable, "-c", _CONSOLE, job, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--output" in done.stdout or "usage" in done.stdout
    assert done.stdout.endswith("teardown\n") == torn_down, done.stdout[-200:]
