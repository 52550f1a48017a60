"""Model FLOPs utilisation: the FLOPs a training token costs, and the devices' peak."""

from __future__ import annotations

import torch

# Dense bf16 peak FLOP/s by device name fragment (vendor data sheets), for MFU.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L40": 181e12, "A10G": 125e12,
                   "L4": 121e12, "V100": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


def flops_per_token(model, seq_len: int, head_fraction: float = 1.0) -> float:
    """Training FLOPs per token: 6N for the weights plus 12*L*H*S for attention (the PaLM appendix
    estimate). `head_fraction`: the share of positions the vocabulary projection runs at (about 0.15
    with the gathered head; 1.0 for the full head), so MFU counts only FLOPs that were done."""
    n = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings()
    head_params = head.weight.numel() if head is not None else 0
    c = model.config
    return 6 * (n - head_params * (1 - head_fraction)) + 12 * c.num_hidden_layers * c.hidden_size * seq_len


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))


def peak_flops_of(device_name: str) -> float | None:
    """The table's figure for a device name: the longest fragment it contains wins ("NVIDIA L40S" is
    an L40S, not an L40 or an L4)."""
    found = [fragment for fragment in PEAK_BF16_FLOPS if fragment in device_name]
    return PEAK_BF16_FLOPS[max(found, key=len)] if found else None
