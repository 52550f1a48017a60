"""The numeric precision of `jobs.train` (`--precision`): autocast, the fp16 loss scaler and TF32.

`auto` is bf16 on a GPU that computes it natively (Ampere and later), fp16 with a loss scaler on
one that would emulate bf16 (V100, T4: slower than fp32 there), and fp32 on the CPU. On CUDA, fp32
matrix products (the fp32 run, the loss's fp32 logits) use TF32 tensor cores.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from pipeline.consumers.training.config import PRECISIONS

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class PrecisionError(ValueError):
    """A --precision the device cannot run as asked."""


def native_bf16(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve(requested: str, device: torch.device) -> str:
    """bf16, fp16 or fp32 for `requested` on `device` (see the module's docstring for `auto`)."""
    if requested not in PRECISIONS:
        raise PrecisionError(f"--precision {requested!r}: choose one of {', '.join(PRECISIONS)}")
    if requested == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if native_bf16(device) else "fp16"
    if requested == "bf16" and device.type == "cuda" and not native_bf16(device):
        raise PrecisionError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no native bf16 (it would "
                             "be emulated, slower than fp32): use --precision fp16 (or auto)")
    return requested


@dataclass
class Precision:
    """The resolved precision on a device: its autocast context and its gradient scaler (a
    pass-through unless fp16)."""

    name: str
    device: torch.device

    def __post_init__(self) -> None:
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.name == "fp16")
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    def autocast(self):
        if self.name == "fp32":
            return torch.autocast(self.device.type, enabled=False) if self.device.type in ("cpu", "cuda") \
                else contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_DTYPES[self.name])


def precision_for(requested: str, device: torch.device) -> Precision:
    return Precision(resolve(requested, device), device)


def autocast(device: torch.device):
    """The autocast of `--precision auto` on `device` (bf16 or fp16 on CUDA, plain fp32 elsewhere)."""
    return precision_for("auto", device).autocast()
