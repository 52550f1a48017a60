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


def adamw(model, lr: float, weight_decay: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW over `decay_groups`, fused on CUDA."""
    return torch.optim.AdamW(decay_groups(model, weight_decay), lr=lr, fused=device.type == "cuda")
