"""Console logging: our messages at INFO, Beam's and its workers' only from WARNING unless
`--log_level` asks, Beam's import-time noise held back, and worker processes' own stderr filtered."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import sys
import threading

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
    if not enabled or os.name == "nt":  # select() on pipes is POSIX only
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


def console_fd() -> int:
    """The file descriptor of the user's console (stderr, or its copy while stderr is filtered)."""
    return _console_fd


def keep_console_fd(fd: int) -> None:
    global _console_fd
    _console_fd = fd
