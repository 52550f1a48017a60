"""A progress reporter: a tqdm bar on a terminal, one log line every few seconds otherwise."""

from __future__ import annotations

import contextlib
import logging
import sys
import time

from pipeline.console.formatting import human_bytes, human_seconds, plural
from pipeline.console.logs import console_stream


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
        self._last_logged: tuple = ()
        if stderr_is_terminal() if terminal is None else terminal:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="input", file=console_stream(), dynamic_ncols=True)
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
            try:
                self._bar.update(step)
                self._bar.set_postfix_str(self._rates(), refresh=True)
            except (OSError, ValueError):  # the console went away: the run goes on without a bar
                self._bar = None
        elif time.monotonic() - self._last_line >= self._every:
            self._log_line()

    def _log_line(self) -> None:
        state = (self.done, self.done_bytes, self.extra)
        if state != self._last_logged:  # the same figures at a later time say nothing new
            self._log.info(self.line())
            self._last_logged = state
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
        return f"{self.desc}: {self.done}/{plural(self.total, 'input')}, {self._rates()}"

    def close(self) -> None:
        """The closing state, once: the bar left on screen, or the last line logged unless it just was."""
        if self._bar is not None:
            with contextlib.suppress(OSError, ValueError):
                self._bar.close()
            self._bar = None
            return
        self._log_line()
