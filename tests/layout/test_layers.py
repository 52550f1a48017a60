"""The house layout is kept by tools, inside the test command: import-linter's contracts (setup.cfg),
ruff (ruff.toml), and consumers that import without Apache Beam."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONSUMER_MODULES = [
    "pipeline.consumers.loading", "pipeline.consumers.training.loop", "pipeline.consumers.validation",
    "pipeline.consumers.inspection", "pipeline.consumers.report", "pipeline.consumers.publish",
    "jobs.train", "jobs.validate", "jobs.inspect_output", "jobs.report", "jobs.publish",
]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_import_layers_hold():
    tool = shutil.which("lint-imports")
    if tool is None:
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    done = _run([tool, "--no-cache"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_finds_nothing():
    done = _run([sys.executable, "-m", "ruff", "check", "."])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("module", CONSUMER_MODULES)
def test_consumers_import_without_beam(module):
    code = f"import sys, {module}; print('apache_beam' in sys.modules)"
    done = _run([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", f"{module} imports apache_beam"
