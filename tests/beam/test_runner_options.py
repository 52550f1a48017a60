"""How many `tokenizers` threads each SDK worker process gets, on each kind of runner."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.runner_options import DASK_RUNNER, local_runner_defaults, tokenizer_threads
from pipeline.beam.run.spec_file import ship_spec
from pipeline.beam.transforms import _ProcessUnitFn
from pipeline.beam.units import UnitContext


@pytest.mark.parametrize("args, expected", [
    (["--runner=DataflowRunner", "--project=p", "--region=r"], 1),  # a process per core on every VM
    ([f"--runner={DASK_RUNNER}"], 1),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], 1),
    (local_runner_defaults(["--direct_num_workers=2"]), max(1, (os.cpu_count() or 1) // 2)),  # processes share
    (local_runner_defaults(["--direct_num_workers=2"], prefer_threads=True), None),  # one process, one pool
])
def test_tokenizer_threads_per_sdk_process(args, expected):
    options = PipelineOptions(args)
    assert tokenizer_threads(options) == expected
    assert tokenizer_threads(options, requested=3) == 3  # --tokenizer_threads wins


def test_worker_setup_caps_the_pool_before_the_tokenizer_starts(spec, monkeypatch, tmp_path):
    monkeypatch.setenv("RAYON_NUM_THREADS", "unset")  # so that the teardown restores what was there
    monkeypatch.delenv("RAYON_NUM_THREADS")
    config = PreprocessConfig(inputs=("x",), output=str(tmp_path), tokenizer="t", tokenizer_backend="hf")
    context = UnitContext.from_spec(spec, config, str(tmp_path))
    _ProcessUnitFn(ship_spec(spec, str(tmp_path)), context, tokenizer_threads=1).setup()
    assert os.environ["RAYON_NUM_THREADS"] == "1"


CONCURRENT_IMPORT = """
import sys, threading, time
from pipeline.beam.run.runner_options import outside_ipython
import apache_beam.pipeline as beam_pipeline
from apache_beam.runners.direct import direct_runner
assert "IPython" not in sys.modules
with outside_ipython():
    start = time.perf_counter()
    answers = (beam_pipeline.is_in_ipython(), direct_runner.is_in_ipython())
    print("probe", answers, "IPython" in sys.modules, time.perf_counter() - start < 0.05)
    got = []
    thread = threading.Thread(target=lambda: got.append(__import__("IPython").__name__))
    thread.start()  # another thread of the process imports IPython while the job runs
    thread.join()
    print("thread", got)
    print("after import", beam_pipeline.is_in_ipython())
print("restored", beam_pipeline.is_in_ipython.__module__, beam_pipeline.is_in_ipython.__qualname__)
"""


def test_outside_ipython_answers_beams_probe_and_blocks_no_import(tmp_path):
    """Beam's probe says False at once (no IPython import) while the job runs; another thread importing
    IPython meanwhile gets it (`sys.modules["IPython"] = None` for the whole process made that fail)."""
    pytest.importorskip("IPython")
    import subprocess
    import sys

    from tests.conftest import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", CONCURRENT_IMPORT], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines == ["probe (False, False) False True", "thread ['IPython']", "after import False",
                     "restored apache_beam.utils.interactive_utils is_in_ipython"], out.stdout


def test_beams_probe_is_a_reviewed_one():
    """An upgraded Beam whose `is_in_ipython` changed is left unpatched (slower, never wrong): this
    fails so that the new probe is read and its digest added to REVIEWED_IPYTHON_PROBES."""
    from apache_beam.utils import interactive_utils

    from pipeline.beam.run.runner_options import REVIEWED_IPYTHON_PROBES, probe_digest

    assert probe_digest(interactive_utils.is_in_ipython) in REVIEWED_IPYTHON_PROBES
