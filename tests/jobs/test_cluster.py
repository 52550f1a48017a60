"""The job on real cluster engines started as separate processes: a dask.distributed scheduler
with two workers (Beam's DaskRunner), and Beam's portable job service with an external SDK worker
pool (the path Flink and Spark job servers take). Both must match the local run byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from schemas import manifest as m
from tests.conftest import HAVE_CORPUS, REPO, SMALL_BOOKS, corpus_book, run_preprocess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
# Five books of the shared corpus (one an HTML page), else the embedded sample: byte identity holds on either.
CLUSTER_BOOKS = ("classics__yellow_wallpaper.txt", "drama__hamlet.txt", "classics__great_gatsby.txt",
                 "philosophy__the_prince.txt", "poetry__spoon_river_anthology.txt") if HAVE_CORPUS else SMALL_BOOKS


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port}")


class Processes:
    """Background processes in their own sessions, killed (with their children) at the end."""

    def __init__(self, logs) -> None:
        self.procs: list[subprocess.Popen] = []
        self.logs = logs

    def start(self, name: str, argv: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env=dict(os.environ, PYTHONPATH=str(REPO))))

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


# Every run: dynamic masks, and both kinds of duplicates dropped: the near-duplicate pairs' files,
# their scoring (a twin's pairs left out) and the roots' table are written and read by the engine's
# workers, wherever they run.
JOB = ("--num_shards", "3", "--masking", "dynamic", "--dedup", "--near_dedup", "0.8")


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """The books, a near copy of the first plain-text one (one word changed) and an exact copy of
    that near copy: --near_dedup drops the near copy, --dedup its copy (whose pairs are then not
    scored)."""
    folder = tmp_path_factory.mktemp("cluster_books")
    for name in CLUSTER_BOOKS:
        shutil.copy(corpus_book(name), folder / name)
    text = next(text for text in ((folder / name).read_text(encoding="utf-8") for name in CLUSTER_BOOKS)
                if not text.lstrip().startswith("<"))  # a book, not the HTML page
    first = text.index(" the ", len(text) // 2)  # in the body: a licence header is cleaned away
    (folder / "zz_near.txt").write_text(text[:first] + " a " + text[first + 5:], encoding="utf-8")
    shutil.copy(folder / "zz_near.txt", folder / "zz_near_copy.txt")
    return folder


@pytest.fixture(scope="module")
def local_run(books, tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster_local") / "out"
    run_preprocess([books], out, *JOB)
    skipped = json.loads((out / m.MANIFEST_FILE).read_text())[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON]
    assert skipped.get("duplicate") == 1 and skipped.get("near duplicate") == 1, skipped
    return out


def _hashes(out):
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != m.MANIFEST_FILE}


def _same_as_local(out, local_run, split: bool = False) -> None:
    """Byte-identical shards and manifest; `split`: the run split its books into byte ranges, which
    only its config and the shards' plan hashes (which include the config) may show."""
    assert _hashes(out) == _hashes(local_run)
    a = json.loads((local_run / m.MANIFEST_FILE).read_text())
    b = json.loads((out / m.MANIFEST_FILE).read_text())
    for manifest in (a, b):
        manifest[m.KEY_CONFIG]["output"] = "out"
        if split:
            manifest[m.KEY_CONFIG].pop("split_bytes")
            for info in manifest[m.KEY_SPLITS].values():
                for shard in info["shards"]:
                    shard.pop("plan_sha256")
    assert a == b


def test_dask_cluster_of_processes_matches_the_local_run(books, local_run, tmp_path):
    port = _free_port()
    procs = Processes(tmp_path)
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    try:
        procs.start("scheduler", [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])
        _wait_for_port(port)
        for i in range(2):
            procs.start(f"worker{i}", [dask, "worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
                                       "--memory-limit", "3GB", "--no-dashboard", "--name", f"w{i}"])
        out = tmp_path / "out"
        # books over 64 KB are tokenized in byte ranges by the cluster's workers and stitched
        run_preprocess([books], out, *JOB, "--runner", "DaskRunner",
                       "--dask_client_address", f"tcp://127.0.0.1:{port}", "--split_bytes", "65536")
    finally:
        procs.stop()
    _same_as_local(out, local_run, split=True)


def test_portable_runner_with_external_workers_matches_the_local_run(books, local_run, tmp_path):
    job_port, pool_port = _free_port(), _free_port()
    procs = Processes(tmp_path)
    try:
        procs.start("job_service", [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                                    "--port", str(job_port)])
        procs.start("worker_pool", [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                                    "--service_port", str(pool_port)])
        _wait_for_port(job_port)
        _wait_for_port(pool_port)
        out = tmp_path / "out"
        run_preprocess([books], out, *JOB, "--runner", "PortableRunner",
                       "--job_endpoint", f"localhost:{job_port}", "--environment_type", "EXTERNAL",
                       "--environment_config", f"localhost:{pool_port}")
    finally:
        procs.stop()
    _same_as_local(out, local_run)


def test_dask_local_workers_helper(books, local_run, tmp_path):
    out = tmp_path / "out"
    run_preprocess([books], out, *JOB, "--dask_local_workers", "2")
    _same_as_local(out, local_run)
