"""`python -m jobs.train --nproc_per_node N`: N ranks on this machine without torchrun, so a stop is one
line and one exit code.

Under `torchrun`, a terminal's Ctrl-C reaches the launcher too, and its elastic agent prints its own
traceback beside the run's one-line message. Here the ranks run in their own process group (the
terminal's Ctrl-C reaches only this launcher) and the launcher hands each stop signal to every rank
exactly once: the ranks agree on the step boundary, rank 0 saves and prints the one line, and all exit
130 (SIGINT) or 143 (SIGTERM), which the launcher returns. A second signal is handed on too (the ranks
then stop at once, as one process does). SIGHUP (the terminal or the ssh session closed) is handed on
as SIGTERM. The ranks never outlive the launcher: on Linux each gets SIGTERM when it dies (a parent-death
signal, so a SIGKILL or the OOM killer of the launcher too), and stops as for SIGTERM. A rank that fails
for another reason stops the others (SIGTERM after a grace period, SIGKILL if they do not go). One
machine only: across machines, torchrun.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

LAUNCHER_ENV = "MASKBEAM_RANK_LAUNCHER"  # set in the ranks this launcher starts (their --resume hint)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_GRACE_S = 60.0  # once a rank failed: how long the others get to finish before SIGTERM
_KILL_S = 15.0  # after SIGTERM: before SIGKILL


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parent_death_signal() -> Callable[[], None] | None:
    """A `preexec_fn` that asks Linux to send the rank SIGTERM when the launcher dies (prctl
    PR_SET_PDEATHSIG); None elsewhere. libc is loaded here, before the fork; a launcher that died
    between the fork and the prctl call is caught by comparing the parent pid."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def set_it() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(143)

    return set_it


def launch_ranks(module: str, argv: list[str], nproc: int, grace_s: float = _GRACE_S) -> int:
    """Run `python -m module *argv` as ranks 0..nproc-1 of one job (torch's env:// rendezvous on
    localhost: MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE); returns the
    exit code: 0, the stop signal's 130/143, or the first failed rank's code."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(nproc),
               LOCAL_WORLD_SIZE=str(nproc), **{LAUNCHER_ENV: str(nproc)})
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    ranks: list[subprocess.Popen] = []
    stops: list[int] = []

    def hand_on(signum: int, _frame) -> None:
        signum = signal.SIGTERM if signum == signal.SIGHUP else signum
        stops.append(signum)
        for proc in ranks:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, hand_on) for sig in _STOP_SIGNALS}
    dies_with_launcher = _parent_death_signal()
    try:
        for rank in range(nproc):
            ranks.append(subprocess.Popen([sys.executable, "-m", module, *argv], start_new_session=True,
                                          preexec_fn=dies_with_launcher,
                                          env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank))))
        return _wait(ranks, stops, grace_s)
    finally:
        for proc in ranks:  # never leave a rank behind (an exception in this launcher included)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(ranks: list[subprocess.Popen], stops: list[int], grace_s: float) -> int:
    failed_at = terminated_at = None
    first_failure = 0  # the code of the rank that failed first (the others may then fail on its account)
    while None in [proc.poll() for proc in ranks]:  # a list, not any(): every rank is polled
        codes = [proc.returncode for proc in ranks if proc.returncode is not None]
        now = time.monotonic()
        if failed_at is None and any(codes) and not stops:
            failed_at, first_failure = now, next(code for code in codes if code)
        if failed_at is not None and terminated_at is None and now - failed_at > grace_s:
            terminated_at = now
            for proc in ranks:
                if proc.poll() is None:
                    proc.terminate()
        if terminated_at is not None and now - terminated_at > _KILL_S:
            for proc in ranks:
                if proc.poll() is None:
                    proc.kill()
        time.sleep(0.05)
    codes = [_exit_code(proc.returncode) for proc in ranks]
    if stops:
        stopped = 130 if stops[0] == signal.SIGINT else 143
        return next((code for code in codes if code not in (0, stopped)), stopped)
    return _exit_code(first_failure) or next((code for code in codes if code), 0)


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode  # killed by a signal: 128 + its number
