"""Console logging: our messages at INFO, Beam's and its workers' only from WARNING unless
`--log_level` asks, Beam's import-time noise held back, escapes made visible, lines that never share the
progress bar's line, and worker processes' own stderr kept in a file and shown only where it says more."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
import tempfile
import threading

from pipeline.console.formatting import printable

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


class ConsoleFormatter(logging.Formatter):
    """`HH:MM:SS LEVEL message`, with non-printable characters escaped (paths and reasons come from
    files the user did not make: an OSC or CSI sequence in a file name must not reach the terminal)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class ConsoleHandler(logging.Handler):
    """Writes to the console (whatever `sys.stderr` is at the time): through tqdm's `write` so a line
    never shares a progress bar's line, and, once the console has gone away (`... 2>&1 | head`), to
    nowhere instead of failing or blocking."""

    def emit(self, record: logging.LogRecord) -> None:
        if _console_gone:
            return
        try:
            message = self.format(record)
            stream = console_stream()
            tqdm_write = _tqdm_write()
            if tqdm_write is not None:
                tqdm_write(message, file=stream)
            else:
                stream.write(message + "\n")
            stream.flush()
        except (BrokenPipeError, ConnectionResetError):
            console_gone()
        except OSError as error:
            if error.errno != errno.EPIPE:
                self.handleError(record)
            else:
                console_gone()
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


def _tqdm_write():
    """tqdm's `write` once tqdm is imported (a bar can exist only then: the progress bar imports it),
    else None: importing tqdm (~0.03 CPU-s, importlib.metadata and email with it) for a job that
    shows no bar is a cost of every run's start."""
    tqdm = sys.modules.get("tqdm")
    return getattr(getattr(tqdm, "tqdm", None), "write", None)


_console_gone = False


def console_gone() -> None:
    """The console's reader went away: from now on the console is /dev/null (writes by any thread or
    by the interpreter at exit then neither fail nor block), and the job goes on to finish its output."""
    global _console_gone
    _console_gone = True
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in {sys.stderr, sys.__stderr__, console_stream()}:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)


def is_console_gone() -> bool:
    return _console_gone


_console_stream = None  # the console while file descriptor 2 (and sys.stderr) go to the workers' file


def console_stream():
    """Where our own lines and the progress bar go: the console (`sys.stderr`, or its copy while the
    workers' output is kept off it)."""
    return _console_stream if _console_stream is not None else sys.stderr


def setup_logging(level: str | None = None) -> None:
    """Our own messages at INFO; everything else (Beam, its SDK workers, libraries) at WARNING, or at
    `level` when given (which also shows the import-time warnings held back so far)."""
    chosen = getattr(logging, (level or "WARNING").upper())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        with contextlib.suppress(Exception):
            old.close()
    handler = ConsoleHandler()
    handler.setFormatter(ConsoleFormatter())
    root.addHandler(handler)
    root.setLevel(chosen)
    hold_back_import_noise()
    logging.getLogger(OUR_LOGGER).setLevel(min(chosen, logging.INFO))
    if chosen <= logging.INFO:
        records = list(_held_back)
        _held_back.clear()
        for record in records:  # straight to the handlers: the root logger's filter would hold them again
            for handler in logging.getLogger().handlers:
                handler.handle(record)


# What Beam's SDK worker processes and Dask's workers print on their own stderr (they configure their
# logging before any of our code runs in them: Python's default `LEVEL:name:` format), with the
# tracebacks Beam prints for a failed bundle and the report Rust's panic hook prints for a panic of
# `tokenizers` (the job reports the failure itself, once, naming the input and the tokenizer).
_WORKER_NOISE = re.compile(
    r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:|Traceback \(most recent call last\):"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - \S+ - (?:INFO|DEBUG) - |thread '[^']*'(?: \(\d+\))? panicked at )")
# A worker's error log goes on with its traceback: these lines belong to the line dropped before.
_CONTINUATION = re.compile(r"^(?:\s|Traceback |During handling |The above exception |stack backtrace:"
                           r"|[A-Za-z_][\w.]*(?::|$)|$)")
_console_fd = 2  # where the user's console is while the workers' output goes to their log file
WORKER_LINES_SHOWN = 20
_worker_logs: list[str] = []  # the workers' output files of the runs in progress


class _DropWorkerNoise(logging.Filter):
    """For the console handler (the launcher relays worker logs): drops the warning every SDK worker logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No semi_persistent_directory found" not in record.getMessage()


def worker_lines(text: str) -> list[str]:
    """The lines of the workers' own output worth showing: not their logging (relayed to the launcher's
    log already, at the user's level) nor the tracebacks of failed bundles (reported once by the job)."""
    kept, dropping = [], False
    for line in text.splitlines():
        dropping = bool(_WORKER_NOISE.match(line)) or (dropping and bool(_CONTINUATION.match(line)))
        if not dropping and line.strip():
            kept.append(line)
    return kept


class WorkerOutput:
    """The file that the worker processes' (inherited) stderr is written to during a quiet run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                return worker_lines(f.read())
        except OSError:
            return []

    def report(self, log: logging.Logger, *, failed: bool) -> None:
        """Show what the workers printed beyond their logging (a crash message, a library's warning), at
        most WORKER_LINES_SHOWN lines; the file is kept when the run failed or lines were left out."""
        lines = self.lines()
        for line in lines[:WORKER_LINES_SHOWN]:
            log.warning("worker output: %s", line)
        keep = failed or len(lines) > WORKER_LINES_SHOWN
        if keep:
            log.info("the worker processes' own output is in %s", self.path)
        else:
            with contextlib.suppress(OSError):
                os.remove(self.path)


def _raised_in_beam(tb) -> bool:
    """Whether an exception was raised inside Apache Beam's own code (its SDK worker threads run in
    this process with --direct_running_mode multi_threading, and may fail as a run is torn down after
    the failure the job reports itself): such a traceback is worker output, not a launcher crash."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and f"{os.sep}apache_beam{os.sep}" in last.tb_frame.f_code.co_filename


@contextlib.contextmanager
def quiet_worker_output(enabled: bool = True):
    """Send this process's file descriptor 2 (inherited by every worker process it starts) to a log
    file, while this process's own writes (logging, the progress bar, tracebacks of its threads) go to
    the console through `sys.stderr`, unfiltered. Yields a WorkerOutput (None when not `enabled`).

    A regular file, not a pipe: no filtering thread that can die or fall behind, no write that can block
    when the console goes away, and a worker still running after the run writes into that file (its own
    descriptor), never into another file of ours. Beam's loggers in this process are muted below
    CRITICAL meanwhile: the job reports a failure itself, once."""
    global _console_fd, _console_stream
    if not enabled or os.name == "nt":
        yield None
        return
    beam_logger = logging.getLogger("apache_beam")
    beam_level = beam_logger.level
    beam_logger.setLevel(logging.CRITICAL)
    drop = _DropWorkerNoise()
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(drop)
    fd, path = tempfile.mkstemp(prefix="maskbeam-workers-", suffix=".log")
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    console = os.dup(2)
    stream = open(console, "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",  # noqa: SIM115
                  errors="replace", closefd=True)
    os.dup2(fd, 2)
    os.close(fd)
    # sys.stderr stays on descriptor 2: what Beam prints there itself (a failed bundle's traceback, in
    # a worker thread of this process) goes to the file as a worker process's does. Our handler, the
    # bar and an uncaught exception of any thread (a crash worth seeing) go to the console.
    excepthook = threading.excepthook

    def to_console(args) -> None:
        if _raised_in_beam(args.exc_traceback):  # a Beam worker thread of this process: worker output
            excepthook(args)
            return
        saved, sys.stderr = sys.stderr, stream
        try:
            excepthook(args)
        finally:
            sys.stderr = saved

    threading.excepthook = to_console
    _console_stream, _console_fd = stream, console
    _worker_logs.append(path)
    failed = False
    try:
        yield WorkerOutput(path)
    except BaseException:
        failed = True
        raise
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
            stream.flush()
        with contextlib.suppress(ValueError):
            _worker_logs.remove(path)
        os.dup2(console, 2)  # back to the console (or to /dev/null, where the console went away)
        _console_stream, _console_fd = None, 2
        if threading.excepthook is to_console:
            threading.excepthook = excepthook
        # Closing the stream makes a late write by a leftover thread fail, never land in a reused descriptor.
        with contextlib.suppress(OSError):
            stream.close()
        for handler in handlers:
            handler.removeFilter(drop)
        # After a failure, Beam's SDK worker threads of this process may still be tearing down bundles
        # and log their own tracebacks of it (`KeyError: 'bundle_11'` on release): the job has
        # reported the failure once, and the process is about to exit, so Beam stays muted.
        if not failed:
            beam_logger.setLevel(beam_level)


def drop_worker_logs() -> None:
    """Remove the workers' output files of the runs in progress (an interrupted run leaves by
    `os._exit`, past the clean-up of `quiet_worker_output`)."""
    for path in list(_worker_logs):
        with contextlib.suppress(OSError):
            os.remove(path)


def console_fd() -> int:
    """The file descriptor of the user's console (stderr, or its copy while stderr is filtered)."""
    return _console_fd


def keep_console_fd(fd: int) -> None:
    global _console_fd
    _console_fd = fd
