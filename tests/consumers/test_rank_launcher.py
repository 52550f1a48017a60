"""`python -m jobs.train --nproc_per_node N`'s launcher with stand-in ranks (small scripts): the
rendezvous environment, a stop signal handed to every rank exactly once, a failed rank stopping the
others. The real ranks under it: tests/jobs/test_train_ddp.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pipeline.consumers.training.launcher import LAUNCHER_ENV, launch_ranks

RANK_SCRIPT = textwrap.dedent('''
    import json, os, signal, sys, time
    out = sys.argv[1]
    rank = os.environ["RANK"]
    got = []
    signal.signal(signal.SIGINT, lambda s, f: got.append(s))
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER_ENV")
    with open(os.path.join(out, "env-" + rank), "w") as f:
        json.dump({k: os.environ.get(k) for k in keys} | {"pgid_is_own": os.getpgid(0) == os.getpid(), "pid": os.getpid()}, f)
    mode = sys.argv[2]
    if mode == "fail" and rank == "1":
        sys.exit(3)
    if mode == "quick":
        sys.exit(0)
    deadline = time.time() + 60
    while time.time() < deadline and not got:
        time.sleep(0.01)
    time.sleep(0.3)  # a second signal would arrive now
    with open(os.path.join(out, "signals-" + rank), "w") as f:
        json.dump(got, f)
    sys.exit({2: 130, 15: 143}[got[0]] if got else 0)
'''.replace("LAUNCHER_ENV", LAUNCHER_ENV))


@pytest.fixture
def rank_module(tmp_path, monkeypatch):
    (tmp_path / "fake_rank.py").write_text(RANK_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "fake_rank"


def _launch(tmp_path, mode: str, nproc: int) -> subprocess.Popen:
    code = (f"import sys; from pipeline.consumers.training.launcher import launch_ranks; "
            f"sys.exit(launch_ranks('fake_rank', [{str(tmp_path)!r}, {mode!r}], {nproc}, grace_s=0.5))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def _wait_for_ranks(tmp_path, nproc: int) -> None:
    deadline = time.time() + 60
    while time.time() < deadline and len(list(tmp_path.glob("env-*"))) < nproc:
        time.sleep(0.02)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_reaches_every_rank_once_and_sets_the_exit_code(tmp_path, rank_module, sig, code):
    """A terminal's Ctrl-C (SIGINT to the launcher's process group) or a scheduler's SIGTERM to the
    launcher: each rank, in its own process group, gets the signal exactly once."""
    proc = _launch(tmp_path, "stop", 3)
    _wait_for_ranks(tmp_path, 3)
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
    assert proc.wait(timeout=60) == code
    envs = [json.loads((tmp_path / f"env-{r}").read_text()) for r in range(3)]
    assert [e["RANK"] for e in envs] == [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {e["LOCAL_WORLD_SIZE"] for e in envs} == {e[LAUNCHER_ENV] for e in envs}
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and len({e["MASTER_PORT"] for e in envs}) == 1
    assert all(e["MASTER_ADDR"] == "127.0.0.1" and e["pgid_is_own"] for e in envs)
    assert [json.loads((tmp_path / f"signals-{r}").read_text()) for r in range(3)] == [[int(sig)]] * 3


def test_a_failed_rank_stops_the_others_and_its_code_is_returned(tmp_path, rank_module):
    """Rank 1 exits 3 while rank 0 would run on for a minute: after the grace period rank 0 gets SIGTERM
    (its stand-in then exits 143), and the launcher returns the failure's 3."""
    started = time.time()
    assert launch_ranks(rank_module, [str(tmp_path), "fail"], 2, grace_s=0.5) == 3
    assert time.time() - started < 15  # the grace period, not the minute
    assert json.loads((tmp_path / "signals-0").read_text()) == [int(signal.SIGTERM)]


def test_ranks_that_finish_return_zero(tmp_path, rank_module):
    assert launch_ranks(rank_module, [str(tmp_path), "quick"], 2) == 0
    assert sorted(p.name for p in tmp_path.glob("env-*")) == ["env-0", "env-1"]


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its new parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_ranks_die_with_a_killed_launcher(tmp_path, rank_module):
    """SIGKILL (or the OOM killer) of the launcher: its ranks, in sessions of their own, get SIGTERM from
    the kernel and are gone within seconds instead of training on (orphans, parent pid 1)."""
    proc = _launch(tmp_path, "stop", 2)
    _wait_for_ranks(tmp_path, 2)
    pids = [json.loads((tmp_path / f"env-{r}").read_text())["pid"] for r in range(2)]
    assert all(_alive(pid) for pid in pids)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), pids
    assert [json.loads((tmp_path / f"signals-{r}").read_text()) for r in range(2)] == [[int(signal.SIGTERM)]] * 2


def test_sighup_is_handed_on_as_sigterm(tmp_path, rank_module):
    """The terminal or ssh session closed (SIGHUP to the launcher): every rank gets SIGTERM, saves and
    stops, and the launcher returns 143."""
    proc = _launch(tmp_path, "stop", 2)
    _wait_for_ranks(tmp_path, 2)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=60) == 143
    assert [json.loads((tmp_path / f"signals-{r}").read_text()) for r in range(2)] == [[int(signal.SIGTERM)]] * 2
