"""Helpers of the trainer (jobs/train.py): the config and its flags, the LR schedule, the gathered MLM
loss, evaluation, MFU, the fill-mask probe and the saved tokenizer. torch/transformers code, never
imported by Beam modules."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pipeline.consumers.training.config import TrainConfig
from pipeline.consumers.training.models import encoder_and_head
from schemas import manifest as m
from schemas.options import SPECIAL_CLS, SPECIAL_PAD, SPECIAL_SEP
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS

# Dense bf16 peak FLOP/s by device name fragment (vendor data sheets), for MFU.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L40": 181e12, "A10G": 125e12,
                   "L4": 121e12, "V100": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "train_config.json"
LOG_FILE = "train.log"


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warmup to cfg.lr, then linear or cosine decay to 0 at total_steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    if cfg.schedule == "cosine":
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (1 - progress)


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


def target_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the target positions only, and their labels: the encoder runs on every position,
    the vocabulary projection (the MLM head) only where labels != -100, as NVIDIA's and Megatron's
    BERT do (and ModernBERT's `sparse_prediction`). About 85% of the head's FLOPs and activation
    memory are otherwise spent on positions the loss ignores; for small models the head is most of
    the step. Families without a known head (`models.encoder_and_head`) run the full head.
    """
    selected = labels != IGNORE_INDEX
    parts = encoder_and_head(model)
    if parts is None:
        return model(input_ids=input_ids, attention_mask=attention_mask).logits[selected], labels[selected]
    encoder, head = parts
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return head(hidden[selected]), labels[selected]


def mlm_loss_sum(model, batch: dict) -> tuple[torch.Tensor, int]:
    """The summed cross-entropy over the batch's targets, and their number (the gathered head)."""
    logits, targets = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS])
    if targets.numel() == 0:  # no target in the batch: a zero that still backpropagates
        return logits.sum() * 0.0, 0
    return F.cross_entropy(logits.float(), targets, reduction="sum"), int(targets.numel())


def mlm_loss(model, batch: dict) -> torch.Tensor:
    """The MLM loss of `model(**batch).loss` (mean cross-entropy over targets), with the gathered head."""
    total, count = mlm_loss_sum(model, batch)
    return total / max(count, 1)


@torch.no_grad()
def evaluate(model, batches, device: torch.device, reduce: Callable[[list[float]], list[float]] = lambda x: x,
             should_stop: Callable[[], bool] = lambda: False) -> dict | None:
    """MLM loss and top-1 accuracy over the target positions of `batches` (this rank's share);
    `reduce` sums the totals over the ranks. {} when there was no target (nothing measured); None when
    `should_stop` turned true on any rank (a stop request: the evaluation is abandoned at once, each
    rank after its current batch)."""
    model.eval()
    loss_sum, correct, targets, stopped = 0.0, 0, 0, False
    for batch in batches:
        if should_stop():
            stopped = True
            break
        batch = {k: v.to(device, non_blocking=True).long() for k, v in batch.items()}
        with autocast(device):
            logits, labels = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS])
        loss_sum += F.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        targets += int(labels.numel())
    model.train()
    loss_sum, correct, targets, stopped = reduce([loss_sum, float(correct), float(targets), float(stopped)])
    if stopped:
        return None
    if not targets:
        return {}
    return {"eval_loss": loss_sum / targets, "eval_accuracy": correct / targets, "eval_targets": int(targets)}


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


def autocast(device: torch.device):
    """bf16 autocast on CUDA, plain fp32 elsewhere."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def probe(model, tokenizer, path: str, device: torch.device, top_k: int = 5) -> list[str]:
    """Top predictions for each [MASK] in each line of a text file (the tutorial's check)."""
    lines = []
    model.eval()
    with open(path, encoding="utf-8") as handle:
        for sentence in (line.strip() for line in handle):
            if not sentence:
                continue
            encoded = tokenizer(sentence, return_tensors="pt").to(device)
            with torch.no_grad():
                logits = model(**encoded).logits[0]
            where = (encoded[INPUT_IDS][0] == tokenizer.mask_token_id).nonzero().flatten().tolist()
            guesses = [tokenizer.convert_ids_to_tokens(logits[i].topk(top_k).indices.tolist()) for i in where]
            lines.append(f"{sentence} -> {guesses}")
    model.train()
    return lines


def hf_tokenizer(spec, model_max_length: int, model=None):
    """A transformers fast tokenizer from the tokenizer copy stored with the data, with the model's
    length: saved with the model, `AutoTokenizer` and `pipeline("fill-mask")` then truncate long
    texts to the positions the model has instead of overflowing them. Models without token types
    (RoBERTa-style, DistilBERT, ModernBERT) get no `token_type_ids` input."""
    import inspect

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from pipeline.tokenizer.transformers_files import special_tokens

    names = ["input_ids", "token_type_ids", "attention_mask"]
    if model is not None and ("token_type_ids" not in inspect.signature(model.forward).parameters
                              or getattr(model.config, "type_vocab_size", 2) < 2):
        names.remove("token_type_ids")
    # The special tokens exactly as the output's own tokenizer_config.json names them (the unknown
    # token by the id the spec uses, every other never-selected id an additional special token).
    record = {m.KEY_SPECIAL_IDS: {SPECIAL_CLS: spec.cls_id, SPECIAL_SEP: spec.sep_id, SPECIAL_PAD: spec.pad_id,
                                  m.KEY_MASK_ID: spec.mask_id},
              m.KEY_NEVER_SELECTED: list(spec.special_ids)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(spec.json), model_max_length=model_max_length,
                                   model_input_names=names, **special_tokens(spec.json, record))


def plot_metrics(metrics_path: str, png: str) -> None:
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
