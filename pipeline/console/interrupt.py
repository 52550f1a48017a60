"""Ctrl-C and SIGTERM: run the pipeline so that only the launcher receives them, stop every worker
process, and leave with one line and the shell's exit status: 130 after SIGINT, 143 after SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from pipeline.console import logs
from pipeline.console.formatting import printable

T = TypeVar("T")


class Interrupted(Exception):
    """The user pressed Ctrl-C or the job got SIGTERM; the workers are already stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_describe: Callable[[], str] | None = None  # what an interrupt leaves behind, set by the running job


def on_interrupt(describe: Callable[[], str] | None) -> None:
    """Register what `run_main` prints after `interrupted (SIGNAL) ` (e.g. `after 3 of 9 inputs; rerun
    ... --resume`); None: `before any input was processed`."""
    global _describe
    _describe = describe


def run_main(target: Callable[[], T]) -> T:
    """A job's whole `main()`: SIGINT and SIGTERM blocked (SIGINT also ignored) from the first line on,
    then `target` (imports, checks, the run) on a thread while the main thread waits for either signal.

    Blocked, every thread and library thread started later inherits the block, so no thread but the
    waiting one ever sees a signal; ignored, SIGINT is ignored by every worker process started later
    (a shell in between, as Beam starts its SDK workers, clears the blocked set but must keep an
    ignored signal ignored), so a terminal's Ctrl-C, sent to the whole process group, reaches only this
    process and no worker prints a KeyboardInterrupt traceback. Linux keeps a blocked signal pending even when
    ignored, for `sigtimedwait` to take. On a signal: every descendant is killed and one line printed,
    exit status 130 (SIGINT) or 143 (SIGTERM), whenever it comes (while Beam is still importing too).

    Where `sigtimedwait` does not exist (macOS) `target` runs on the main thread and a Ctrl-C still
    stops the workers with one line from this process (the workers may print their own tracebacks).
    """
    if not hasattr(signal, "sigtimedwait") or threading.current_thread() is not threading.main_thread():
        try:
            return target()
        except KeyboardInterrupt:
            _stop(signal.SIGINT)
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["result"] = target()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread as is
            outcome["error"] = error

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)  # for the workers; SIGTERM goes to this process alone
    try:
        thread = threading.Thread(target=work, name="maskbeam-job", daemon=True)
        thread.start()
        while thread.is_alive():
            got = _wait_for_stop(0.2)
            if got is not None:
                _stop(got)
    finally:
        # A caller that goes on (a test, a library user calling main()) gets its signals back: processes
        # it starts later would otherwise inherit SIGINT ignored and both signals blocked.
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _wait_for_stop(seconds: float) -> int | None:
    """SIGINT or SIGTERM if one came within `seconds`, else None. A process stopped and continued
    (SIGSTOP/SIGCONT: a shell's Ctrl-Z and `fg`, a scheduler's suspend, a profiler or debugger
    attaching) gets from `sigtimedwait` a siginfo of no signal (its fields uninitialised: si_signo
    1831169632 was seen): not a stop. Taken for one, it silenced the output and ended the run with
    status 1 and no message."""
    got = signal.sigtimedwait(_STOP_SIGNALS, seconds)
    return got.si_signo if got is not None and got.si_signo in _STOP_SIGNALS else None


def _stop(signum: int) -> None:
    _silence_for_exit()
    kill_descendants()
    logs.drop_worker_logs()  # what killed workers printed is of no use after an interrupt
    describe = _describe
    try:
        detail = describe() if describe is not None else "before any input was processed"
    except Exception:  # noqa: BLE001 - the run is being torn down: a plain line beats none
        detail = "before the run finished"
    exit_interrupted(f"interrupted ({signal.Signals(signum).name}) {detail}", signum)


def run_interruptible(target: Callable[[], T]) -> T:
    """Run `target` on a thread with SIGINT and SIGTERM blocked, so the threads and worker processes
    it starts inherit the block and a terminal's Ctrl-C reaches only this process (no traceback from
    every worker); the main thread waits for either. On a signal every descendant process is killed
    and Interrupted is raised (the target's own threads are left to the process exit).

    Off the main thread `target` simply runs. Where `sigtimedwait` does not exist (macOS), it runs
    on the main thread and a Ctrl-C there still stops the workers and raises Interrupted (the
    workers, in the terminal's process group, may print their own tracebacks first).
    """
    if threading.current_thread() is not threading.main_thread():
        return target()
    if not hasattr(signal, "sigtimedwait"):
        try:
            return target()
        except KeyboardInterrupt:
            _silence_for_exit()
            kill_descendants()
            raise Interrupted(signal.SIGINT) from None
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["result"] = target()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread as is
            outcome["error"] = error

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        thread = threading.Thread(target=work, name="maskbeam-run", daemon=True)
        thread.start()
        while thread.is_alive():
            got = _wait_for_stop(0.2)
            if got is not None:
                _silence_for_exit()
                kill_descendants()
                raise Interrupted(got)
    except KeyboardInterrupt:  # delivered to a thread started before the block
        _silence_for_exit()
        kill_descendants()
        raise Interrupted(signal.SIGINT) from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _silence_for_exit() -> None:
    """The run's threads fail noisily once their workers are killed: from here on only
    `exit_interrupted` writes to the console."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    console = logs.console_fd()
    logs.keep_console_fd(os.dup(console))  # for exit_interrupted's line alone
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in {2, console}:  # the progress bar and any late line of a thread go nowhere
        os.dup2(devnull, fd)
    os.close(devnull)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the rest of this process's short life
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None


def _child_pids() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (Linux), else from psutil where it is installed."""
    children: dict[int, list[int]] = {}
    if not os.path.isdir("/proc"):
        try:
            import psutil
        except ImportError:
            return children
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                children.setdefault(process.ppid(), []).append(process.pid)
        return children
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    return children


def kill_descendants() -> int:
    """SIGKILL every process below this one (worker processes, a local Dask cluster); returns how many."""
    children, pending, found = _child_pids(), [os.getpid()], []
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


def exit_interrupted(message: str, signum: int = signal.SIGINT) -> None:
    """Print one line and leave at once with 128 + the signal's number, as a shell reports a process
    the signal killed (130 after SIGINT, 143 after SIGTERM: schedulers read 130 as a Ctrl-C): the
    interrupted run's threads are not waited for."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if not logs.is_console_gone():
        with contextlib.suppress(OSError):
            fd = logs.console_fd()
            start = "\n" if os.isatty(fd) else ""  # off a progress bar's line
            os.write(fd, (start + printable(message) + "\n").encode("utf-8", "replace"))
    os._exit(128 + int(signum))
