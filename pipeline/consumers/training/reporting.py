"""Where `jobs.train` sends its metrics besides metrics.jsonl (`--report_to`): TensorBoard event files in
OUTPUT/tensorboard, and W&B when `wandb` is installed. Each metrics.jsonl row becomes scalars of its
step, named as HF `Trainer` names them: `train/loss`, `train/lr`, `train/grad_norm`, ... for a step
row, `eval/loss`, `eval/accuracy`, ... for an evaluation.

On resume, TensorBoard hides what the killed run reported after its checkpoint (`purge_step`), as
metrics.jsonl is trimmed. W&B continues the run of the same id (kept in OUTPUT/wandb/run_id) and has
no such purge: the steps a killed run logged after its checkpoint are logged again there.
"""

from __future__ import annotations

import importlib.util
import os
import secrets

from pipeline.consumers.training.config import TrainConfig, reporters

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


class ReporterError(ValueError):
    """A --report_to whose package is not installed."""


def check_reporters(report_to: str) -> None:
    """Refuse, before anything runs, a reporter whose package is missing (one line, with the install)."""
    for name in reporters(report_to):
        if importlib.util.find_spec(_PACKAGES[name]) is None:
            raise ReporterError(f"--report_to {name}: the {_PACKAGES[name]} package is not installed "
                                f"(pip install {_PACKAGES[name]}), or leave {name} out")


def scalars(row: dict) -> tuple[int, dict[str, float]]:
    """The step of a metrics.jsonl row and its numbers under HF `Trainer`'s names."""
    values = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        values[f"eval/{key[5:]}" if key.startswith("eval_") else f"train/{key}"] = float(value)
    return int(row["step"]), values


class _TensorBoard:
    def __init__(self, output: str, resumed_at: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: events of the killed run at and after the first step of this one are hidden
        self.writer = SummaryWriter(os.path.join(output, TENSORBOARD_DIR),
                                    purge_step=None if resumed_at is None else resumed_at + 1)

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, output: str, cfg: TrainConfig, resumed_at: int | None) -> None:
        import wandb

        folder = os.path.join(output, WANDB_DIR)
        os.makedirs(folder, exist_ok=True)
        id_file = os.path.join(folder, "run_id")
        if resumed_at is not None and os.path.isfile(id_file):
            with open(id_file) as handle:
                run_id = handle.read().strip()
        else:
            run_id = secrets.token_hex(4)
            with open(id_file, "w") as handle:
                handle.write(run_id)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "maskbeam"), dir=output, id=run_id,
                              name=os.path.basename(os.path.normpath(output)), config=vars(cfg), resume="allow")

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


class Reporters:
    """The reporters of `cfg.report_to` (on rank 0; none on the others)."""

    def __init__(self, cfg: TrainConfig, main: bool, resumed_at: int | None) -> None:
        names = reporters(cfg.report_to) if main else []
        check_reporters(",".join(names))
        self._sinks = [_TensorBoard(cfg.output, resumed_at) if name == "tensorboard" else
                       _WandB(cfg.output, cfg, resumed_at) for name in names]

    def log(self, row: dict) -> None:
        if self._sinks:
            step, values = scalars(row)
            for sink in self._sinks:
                sink.log(step, values)

    def flush(self) -> None:
        for sink in self._sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()
        self._sinks = []
