"""What the jobs print: logging set-up, progress, human-readable figures, and clean interrupts.
Standard library only (tqdm when present), so every layer and every job can use it."""

from pipeline.console.formatting import human_bytes, human_seconds, plural, printable
from pipeline.console.interrupt import (
    Interrupted,
    exit_interrupted,
    kill_descendants,
    on_interrupt,
    run_interruptible,
    run_main,
)
from pipeline.console.logs import LOG_LEVELS, hold_back_import_noise, quiet_worker_output, setup_logging
from pipeline.console.progress import ProgressReporter, stderr_is_terminal

__all__ = ["LOG_LEVELS", "Interrupted", "ProgressReporter", "exit_interrupted", "hold_back_import_noise",
           "human_bytes", "human_seconds", "kill_descendants", "on_interrupt", "plural", "printable",
           "quiet_worker_output", "run_interruptible", "run_main", "setup_logging", "stderr_is_terminal"]
