"""The metrics of a `jobs.train` run: metrics.jsonl (a row per step and per evaluation), the rows of a
killed run trimmed on resume, and the curves' plot.

A step's loss and gradient norm stay on the device until the next logging step (`StepRows.flush`):
reading them every step (`.item()`) would wait for the GPU each step, and summing the loss over the
ranks each step would add an all-reduce; at a flush, one copy and one all-reduce cover every
pending step, and each still gets its own row.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

import torch

_log = logging.getLogger("maskbeam.train")

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Appends rows to metrics.jsonl (rank 0; `path` None on the others: rows are dropped) and hands
    each to `reporters` (`reporting.Reporters`: TensorBoard, W&B), if any."""

    def __init__(self, path: str | None, reporters=None) -> None:
        self.path, self.reporters = path, reporters

    def __call__(self, row: dict, announce: bool = False) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        if self.reporters is not None:
            self.reporters.log(row)
        if announce:  # evaluations always reach the log
            _log.info("eval at step %d: %s", row["step"],
                      "  ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "step" and isinstance(v, float)))

    def flush(self) -> None:
        """The reporters' buffered rows to disk (at each checkpoint: a kill loses no saved step's row)."""
        if self.reporters is not None:
            self.reporters.flush()

    def close(self) -> None:
        if self.reporters is not None:
            self.reporters.close()
            self.reporters = None


class StepRows:
    """Step rows waiting for their loss and gradient norm, which stay on the device until `flush`."""

    def __init__(self, log: MetricsLog, reduce: Callable[[list[float]], list[float]]) -> None:
        self.log, self.reduce = log, reduce
        self._rows: list[dict] = []
        self._values: list[torch.Tensor] = []  # per row: [this rank's loss sum, gradient norm]
        self._targets: list[float] = []

    def add(self, row: dict, loss_sum: torch.Tensor, grad_norm: torch.Tensor, step_targets: float) -> None:
        self._rows.append(row)
        self._values.append(torch.stack([loss_sum.detach().float(), grad_norm.detach().float()]))
        self._targets.append(step_targets)

    def flush(self) -> list[dict]:
        """The pending rows with their `loss` (summed over the ranks, per target of the step) and
        `grad_norm`, written in step order; [] when none is pending."""
        if not self._rows:
            return []
        values = torch.stack(self._values).cpu().double()  # the one device sync
        losses = self.reduce(values[:, 0].tolist())  # the one all-reduce
        rows = []
        for row, loss, norm, targets in zip(self._rows, losses, values[:, 1].tolist(), self._targets):
            row = {"step": row["step"], "loss": loss / max(targets, 1), **{k: v for k, v in row.items() if k != "step"},
                   "grad_norm": norm}
            self.log(row)
            rows.append(row)
        self._rows, self._values, self._targets = [], [], []
        return rows


def truncate_jsonl(path: str, step: int) -> None:
    """On resume, drop rows (metrics, samples) a killed run logged after its last checkpoint (and a
    last line it was killed writing)."""
    rows = []
    if os.path.exists(path):
        with open(path) as handle:
            rows = [line for line in handle if line.endswith("\n") and json.loads(line)["step"] <= step]
    with open(path, "w") as handle:
        handle.writelines(rows)


def plot_metrics(metrics_path: str, png: str) -> None:
    """Loss (train and validation) and validation accuracy by step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_path) as handle:
        rows = [json.loads(line) for line in handle]
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_loss" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    left.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="validation")
    left.set_xlabel("step")
    left.set_ylabel("MLM loss")
    left.legend()
    right.plot([r["step"] for r in evals], [r["eval_accuracy"] for r in evals], "o-")
    right.set_xlabel("step")
    right.set_ylabel("top-1 accuracy on targets")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
