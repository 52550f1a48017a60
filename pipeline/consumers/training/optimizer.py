"""The optimizer of `jobs.train`: AdamW with HF `Trainer`'s weight-decay groups."""

from __future__ import annotations

import torch


def decay_groups(model, weight_decay: float) -> list[dict]:
    """AdamW parameter groups as HF `Trainer` makes them: weight decay on the weights, none on the
    biases and the normalisation layers' parameters (LayerNorm, RMSNorm, whatever their class)."""
    exempt = set()
    for module in model.modules():
        kind = type(module).__name__.lower()
        norm = isinstance(module, torch.nn.LayerNorm) or kind.endswith(("layernorm", "rmsnorm"))
        for name, parameter in module.named_parameters(recurse=False):
            if norm or name == "bias" or name.endswith("_bias"):
                exempt.add(id(parameter))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for _, p in named if id(p) not in exempt], "weight_decay": weight_decay},
            {"params": [p for _, p in named if id(p) in exempt], "weight_decay": 0.0}]


def adamw(model, lr: float, weight_decay: float, device: torch.device, *, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, fp16: bool = False) -> torch.optim.AdamW:
    """AdamW over `decay_groups`, fused on CUDA and under fp16 (`fp16`: a GradScaler steps it). The
    fused AdamW takes the scaler's inf check as a tensor and skips a step with inf gradients on the
    device; with the unfused one the scaler reads the check back each step (`.item()`, a GPU -> CPU
    sync), so fp16 on the CPU takes the GPU's path too."""
    return torch.optim.AdamW(decay_groups(model, weight_decay), lr=lr, betas=betas, eps=eps,
                             fused=device.type == "cuda" or fp16)


def apply_gradients(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, parameters,
                    max_grad_norm: float) -> torch.Tensor:
    """The step after the backward passes: unscale, clip to `max_grad_norm` (0: no clipping), step
    (skipped by the fused AdamW itself when the fp16 scaler found inf gradients), update the scale.
    Returns the gradient norm before clipping, left on the device: nothing here reads the device."""
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm > 0 else float("inf"))
    scaler.step(optimizer)
    scaler.update()
    return grad_norm
