"""The local runner each job gets (one in-process worker for a small job), and how many `tokenizers`
threads each SDK worker process gets, on each kind of runner."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil

import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from pipeline.beam.reading.work_units import FORMAT_HF, WorkUnit
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.job import fits_one_worker, job_runner_flags
from pipeline.beam.run.runner_options import (
    DASK_RUNNER,
    ONE_WORKER_BYTES,
    local_runner_defaults,
    local_worker_count,
    tokenizer_threads,
)
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


@pytest.mark.parametrize("given, prefer_threads, workers, mode", [
    ([], True, 1, "in_memory"),  # no worker flag: one worker in this process
    ([], False, 1, "in_memory"),  # as asked (the job asks only where threads would be the default)
    (["--direct_num_workers=2"], True, 2, "multi_threading"),  # a worker flag given: the parallel default
    (["--direct_num_workers=2"], False, 2, "multi_processing"),
    (["--direct_running_mode=multi_threading"], True, os.cpu_count() or 1, "multi_threading"),
])
def test_a_small_job_gets_one_in_process_worker_unless_a_worker_flag_is_given(given, prefer_threads, workers, mode):
    options = PipelineOptions(local_runner_defaults(given, prefer_threads=prefer_threads, one_worker=True))
    assert (local_worker_count(options), options.view_as(DirectOptions).direct_running_mode) == (workers, mode)
    large = PipelineOptions(local_runner_defaults(given, prefer_threads=prefer_threads))
    assert large.view_as(DirectOptions).direct_running_mode != "in_memory"
    assert local_worker_count(large) == (2 if given == ["--direct_num_workers=2"] else os.cpu_count() or 1)
    assert local_runner_defaults(["--runner=DirectRunner"], one_worker=True) == [
        "--runner=DirectRunner", "--default_sdk_harness_log_level=WARNING"]  # a runner chosen: untouched


def _unit(name: str, size: int, fmt: str = "text") -> WorkUnit:
    return WorkUnit(source=f"/books/{name}", format=fmt, size=size)


def test_one_worker_fits_small_uncompressed_text_only():
    half = ONE_WORKER_BYTES // 2
    assert fits_one_worker([_unit("a.txt", half), _unit("b.jsonl", ONE_WORKER_BYTES - half, "jsonl")])
    assert not fits_one_worker([_unit("a.txt", half), _unit("b.txt", ONE_WORKER_BYTES - half + 1)])
    assert fits_one_worker([])
    # what may hold many times the bytes it is listed with
    assert not fits_one_worker([_unit("a.txt", 10), _unit("b.txt.gz", 10)])
    assert not fits_one_worker([_unit("a.parquet", 10, "parquet")])
    assert not fits_one_worker([WorkUnit(source="hf://d?split=train&rows=0-10", format=FORMAT_HF)])


def _output_digests(folder) -> dict[str, str]:
    digests = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                manifest = json.loads(data)
                manifest["config"]["output"] = "OUT"
                data = json.dumps(manifest, sort_keys=True).encode()
            digests[str(path.relative_to(folder))] = hashlib.sha256(data).hexdigest()
    return digests


def test_the_one_in_process_worker_writes_the_bytes_two_worker_threads_write(tmp_path, caplog):
    """The small-job default (Beam's in_memory mode) against two worker threads: every file the same."""
    from tests.conftest import excerpt, run_preprocess

    books = tmp_path / "books"
    books.mkdir()
    for name in ("classics__great_gatsby.txt", "poetry__beowulf.txt", "drama__hamlet.txt"):
        shutil.copy(excerpt(name), books / name)
    common = ["--tokenizer_backend", "fast", "--min_tokens", "8", "--validation_fraction", "0.2", "--seed", "5"]
    with caplog.at_level(logging.INFO, logger="maskbeam"):
        run_preprocess([books], tmp_path / "one", *common)
        run_preprocess([books], tmp_path / "threads", *common, "--direct_num_workers", "2",
                       "--direct_running_mode", "multi_threading")
    runners = [r.getMessage() for r in caplog.records if r.getMessage().startswith("runner: ")]
    assert ["1 worker, in_memory" in runners[0], "2 workers, multi_threading" in runners[1]] == [True, True], runners
    one, threads = _output_digests(tmp_path / "one"), _output_digests(tmp_path / "threads")
    assert len([name for name in one if name.endswith(".arrow")]) == 2
    assert one == threads


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


@pytest.mark.parametrize("backend, packing, large_mode", [
    ("fast", "doc", "multi_threading"), ("hf", "doc", "multi_processing"), ("fast", "sentences", "multi_processing"),
])
def test_a_small_job_runs_in_process_whatever_its_backend_and_packing(backend, packing, large_mode, tmp_path):
    """The `tokenizers` backend and sentence packing too (they kept two worker processes, ~1.5 CPU-s
    each, for a one-book job); a larger job keeps its worker per core, and a worker flag its choice."""
    config = PreprocessConfig(inputs=("/books",), output=str(tmp_path / "out"), tokenizer="t",
                              tokenizer_backend=backend, packing=packing)
    small, large = [_unit("a.txt", 1000)], [_unit("a.txt", ONE_WORKER_BYTES + 1)]
    modes = {name: PipelineOptions(job_runner_flags(config, units, given)).view_as(DirectOptions).direct_running_mode
             for name, units, given in (("small", small, []), ("large", large, []),
                                        ("asked", small, ["--direct_running_mode=multi_processing"]))}
    assert modes == {"small": "in_memory", "large": large_mode, "asked": "multi_processing"}
