"""What the jobs print: logging set-up (our messages at INFO, Beam's and its workers' only from
WARNING unless `--log_level` asks), human-readable sizes and durations, and a progress reporter that
draws a tqdm bar on a terminal and logs one line every few seconds otherwise.

Standard library only (tqdm when present), so every layer and every job can use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
OUR_LOGGER = "maskbeam"
# Logged by Beam's import on every job and of no use to our users (it concerns BigQuery).
_IMPORT_NOISE = ("apitools not found",)
_held_back: list[logging.LogRecord] = []


class _HoldBackImportNoise(logging.Filter):
    """Keeps Beam's import-time warnings out of the console; `setup_logging` replays them when the
    user asks for INFO or DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if any(str(record.msg).startswith(text) for text in _IMPORT_NOISE):
            _held_back.append(record)
            return False
        return True


def hold_back_import_noise() -> None:
    """Install the filter on the root logger (idempotent); called before Beam is first imported."""
    root = logging.getLogger()
    if not any(isinstance(f, _HoldBackImportNoise) for f in root.filters):
        root.addFilter(_HoldBackImportNoise())


def setup_logging(level: str | None = None) -> None:
    """Our own messages at INFO; everything else (Beam, its SDK workers, libraries) at WARNING, or at
    `level` when given (which also shows the import-time warnings held back so far)."""
    chosen = getattr(logging, (level or "WARNING").upper())
    logging.basicConfig(level=chosen, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, force=True)
    hold_back_import_noise()
    logging.getLogger(OUR_LOGGER).setLevel(min(chosen, logging.INFO))
    if chosen <= logging.INFO:
        records = list(_held_back)
        _held_back.clear()
        for record in records:  # straight to the handlers: the root logger's filter would hold them again
            for handler in logging.getLogger().handlers:
                handler.handle(record)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def stderr_is_terminal() -> bool:
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


class ProgressReporter:
    """Shows `done / total` units of work with a byte rate and ETA: a tqdm bar on a terminal, else a
    log line at most every `every` seconds (and always one at `close`)."""

    def __init__(self, total: int, total_bytes: int, *, desc: str, every: float, logger: logging.Logger,
                 terminal: bool | None = None) -> None:
        self.total, self.total_bytes, self.desc = total, total_bytes, desc
        self._every, self._log = every, logger
        self._start = time.monotonic()
        self._last_line = self._start
        self._base_bytes = 0  # bytes already done when we started (a resumed run), not in the rate
        self.done, self.done_bytes, self.extra = 0, 0, ""
        self._bar = None
        if stderr_is_terminal() if terminal is None else terminal:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="input", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def start_from(self, done: int, done_bytes: int) -> None:
        """Work finished before this run started (reused by --resume)."""
        self._base_bytes = done_bytes
        self.update(done, done_bytes)

    def update(self, done: int, done_bytes: int, extra: str = "") -> None:
        step = done - self.done
        self.done, self.done_bytes, self.extra = done, done_bytes, extra
        if self._bar is not None:
            self._bar.update(step)
            self._bar.set_postfix_str(self._rates(), refresh=True)
        elif time.monotonic() - self._last_line >= self._every:
            self._log.info(self.line())
            self._last_line = time.monotonic()

    def _rates(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = (self.done_bytes - self._base_bytes) / elapsed
        left = self.total_bytes - self.done_bytes
        eta = human_seconds(left / rate) if rate > 0 and left > 0 else ("0:00" if left <= 0 else "?")
        parts = [f"{human_bytes(self.done_bytes)} of {human_bytes(self.total_bytes)} read",
                 f"{human_bytes(rate)}/s", f"ETA {eta}"]
        return ", ".join(parts + ([self.extra] if self.extra else []))

    def line(self) -> str:
        return f"{self.desc}: {self.done}/{self.total} inputs, {self._rates()}"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._log.info(self.line())


class Interrupted(Exception):
    """The user pressed Ctrl-C or the job got SIGTERM; the workers are already stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def run_interruptible(target: Callable[[], T]) -> T:
    """Run `target` on a thread with SIGINT and SIGTERM blocked, so the threads and worker processes
    it starts inherit the block and a terminal's Ctrl-C reaches only this process (no traceback from
    every worker); the main thread waits for either. On a signal every descendant process is killed
    and Interrupted is raised (the target's own threads are left to the process exit).

    Off the main thread, or where signal masks do not exist, `target` simply runs.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "sigtimedwait"):
        return target()
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
            got = signal.sigtimedwait(_STOP_SIGNALS, 0.2)
            if got is not None:
                _silence_for_exit()
                kill_descendants()
                raise Interrupted(got.si_signo)
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
    global _console_fd
    sys.stderr.flush()
    if _console_fd == 2:
        _console_fd = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None


def _child_pids() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
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


def exit_interrupted(message: str) -> None:
    """Print one line and leave at once with 130 (as a shell does after Ctrl-C): the interrupted
    run's threads are not waited for."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(_console_fd, (message + "\n").encode("utf-8", "replace"))
    os._exit(130)


# What Beam's SDK worker processes and Dask's workers print on their own stderr (they configure their
# logging before any of our code runs in them), and the tracebacks Beam prints for a failed bundle
# (the job reports the failure itself, once). Our own uncaught errors are printed after the filter
# is gone.
_WORKER_NOISE = re.compile(
    rb"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:|Traceback \(most recent call last\):"
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - \S+ - (?:INFO|DEBUG) - )")
# A worker's error log goes on with its traceback: these lines belong to the line dropped before.
_CONTINUATION = re.compile(rb"^(?:\s|Traceback |During handling |The above exception |[A-Za-z_][\w.]*(?::|$)|$)")
_console_fd = 2  # where the user's console is while stderr is filtered


class _DropWorkerNoise(logging.Filter):
    """For the console handler (the launcher relays worker logs): drops the same warning as _WORKER_NOISE."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No semi_persistent_directory found" not in record.getMessage()


@contextlib.contextmanager
def quiet_worker_output(enabled: bool = True):
    """Route this process's stderr (file descriptor 2, inherited by every worker process it starts)
    through a pipe that drops the workers' own log lines (Python's default `LEVEL:name:` format, with
    any traceback that follows) and passes everything else; a partial line (a progress bar) passes
    once the output pauses. Beam's loggers in this process are muted below CRITICAL meanwhile: the
    job reports a failure itself, once."""
    global _console_fd
    if not enabled:
        yield
        return
    # Beam logs a failing bundle at ERROR several times over; the job reports the failure once.
    beam_logger = logging.getLogger("apache_beam")
    beam_level = beam_logger.level
    beam_logger.setLevel(logging.CRITICAL)
    drop = _DropWorkerNoise()
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(drop)
    sys.stderr.flush()
    console = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    _console_fd = console

    def pump() -> None:
        pending, dropping = b"", False
        while True:
            ready, _, _ = select.select([read_end], [], [], 0.1)
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                kept = []
                for line in lines:
                    dropping = bool(_WORKER_NOISE.match(line)) or (dropping and bool(_CONTINUATION.match(line)))
                    if not dropping:
                        kept.append(line + b"\n")
                if kept:
                    os.write(console, b"".join(kept))
            elif pending and not _WORKER_NOISE.match(pending):
                os.write(console, pending)
                pending = b""
        if pending and not _WORKER_NOISE.match(pending):
            os.write(console, pending)

    thread = threading.Thread(target=pump, name="maskbeam-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(console, 2)  # the pipe ends when the last worker holding it exits
        thread.join(timeout=1.0)
        _console_fd = 2
        for handler in handlers:
            handler.removeFilter(drop)
        beam_logger.setLevel(beam_level)
        if not thread.is_alive():
            os.close(read_end)
        os.close(console)
