"""What the preprocess launcher imports: Beam without pandas, and never torch, transformers or
datasets (each is tenths of a CPU-second of every job's fixed cost, or more)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "torch", "transformers", "datasets", "scipy.linalg")
_LAUNCHER = f"""
import sys
import jobs.preprocess
from pipeline.beam.run import job
from pipeline.beam import transforms
import apache_beam
loaded = sorted(name for name in {HEAVY!r} if name in sys.modules)
import pandas  # still importable once Beam is in
print(loaded, pandas.DataFrame({{"a": [1]}}).shape)
"""


def test_the_launcher_imports_beam_without_pandas_and_no_heavy_library():
    done = subprocess.run([sys.executable, "-c", _LAUNCHER], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[] (1, 1)", done.stdout
