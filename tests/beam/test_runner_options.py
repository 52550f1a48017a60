"""How many `tokenizers` threads each SDK worker process gets, on each kind of runner."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.config import PreprocessConfig
from pipeline.beam.runner_options import DASK_RUNNER, local_runner_defaults, tokenizer_threads
from pipeline.beam.spec_file import ship_spec
from pipeline.beam.transforms import _ProcessUnitFn


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
    _ProcessUnitFn(ship_spec(spec, str(tmp_path)), config, str(tmp_path), tokenizer_threads=1).setup()
    assert os.environ["RAYON_NUM_THREADS"] == "1"


def test_outside_ipython_makes_its_import_fail_fast_and_restores_it(monkeypatch):
    import importlib
    import sys
    import types

    from pipeline.beam.runner_options import outside_ipython

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    with outside_ipython(), pytest.raises(ImportError):
        importlib.import_module("IPython")  # what Beam's is_in_ipython() does at every transform
    assert "IPython" not in sys.modules  # an installed IPython imports as before afterwards

    running = types.ModuleType("IPython")  # a process that runs in IPython has it imported already
    monkeypatch.setitem(sys.modules, "IPython", running)
    with outside_ipython():
        assert importlib.import_module("IPython") is running
    assert sys.modules["IPython"] is running
