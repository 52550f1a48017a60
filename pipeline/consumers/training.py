"""Helpers of the trainer (jobs/train.py): model building, the LR schedule, evaluation, MFU,
checkpoints and the fill-mask probe. torch/transformers code, never imported by Beam modules."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from pipeline.storage.shard_rows import DEFAULT_READ_MODE
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS

MODEL_SIZES = {  # hidden, layers, heads, intermediate
    "tiny": (128, 2, 2, 512),
    "mini": (256, 4, 4, 1024),
    "small": (512, 4, 8, 2048),
    "base": (768, 12, 12, 3072),
}
# Dense bf16 peak FLOP/s by device name fragment (vendor data sheets), for MFU.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12,
                   "V100": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}
CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "train_config.json"


@dataclass
class TrainConfig:
    data: str
    output: str
    model: str | None = None  # Hub name or local folder of a BertForMaskedLM
    config: str = "tiny"  # from-scratch size when --model is not given
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "linear"
    max_steps: int | None = None
    epochs: int = 1
    clip: float = 1.0
    eval_every: int = 0
    eval_batches: int = 50
    save_every: int = 0
    seed: int = 0
    num_workers: int = 0
    compile: bool = False
    resume: bool = False
    probe: str | None = None
    plot: str | None = None
    trim_padding: bool = True
    log_every: int = 10  # steps between progress lines in the log when stdout is not a terminal (0: none)
    cache_dir: str | None = None  # where shards of a remote --data (s3://, gs://, hf://) are copied
    cache_limit: int | None = None  # bytes the shard cache may hold (older copies are evicted)
    read_mode: str = DEFAULT_READ_MODE  # rows from the shards by pread (RSS holds only batches) or mmap

    def save(self, path: str) -> None:
        with open(path, "w") as handle:
            json.dump(asdict(self), handle, indent=2, sort_keys=True)


def build_model(cfg: TrainConfig, vocab_size: int, seq_len: int, pad_id: int):
    """BertForMaskedLM from --model (checked against the data's vocabulary) or from scratch."""
    from transformers import BertConfig, BertForMaskedLM

    if cfg.model:
        model = BertForMaskedLM.from_pretrained(cfg.model)
        if model.config.vocab_size != vocab_size:
            raise ValueError(f"model {cfg.model!r} has a vocabulary of {model.config.vocab_size} ids but the data "
                             f"was tokenized with {vocab_size}: use the model's own tokenizer for preprocessing")
        return model
    if cfg.config not in MODEL_SIZES:
        raise ValueError(f"--config must be one of {sorted(MODEL_SIZES)}, got {cfg.config!r}")
    hidden, layers, heads, inner = MODEL_SIZES[cfg.config]
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=inner, max_position_embeddings=max(512, seq_len), pad_token_id=pad_id)
    return BertForMaskedLM(config)


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warmup to cfg.lr, then linear or cosine decay to 0 at total_steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    if cfg.schedule == "cosine":
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (1 - progress)


def flops_per_token(model, seq_len: int) -> float:
    """6N for the weights plus 12*L*H*S for attention (the PaLM appendix estimate), training."""
    n = sum(p.numel() for p in model.parameters())
    c = model.config
    return 6 * n + 12 * c.num_hidden_layers * c.hidden_size * seq_len


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def target_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the target positions only, and their labels: the encoder runs on every position,
    the vocabulary projection (the MLM head) only where labels != -100, as NVIDIA's and Megatron's
    BERT do. About 85% of the head's FLOPs and activation memory are otherwise spent on positions the
    loss ignores; for small models the head is most of the step.

    Works for any model with `.bert` (or `.base_model`) and `.cls` (BertForMaskedLM and relatives).
    """
    encoder = getattr(model, "bert", None) or model.base_model
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    selected = labels != IGNORE_INDEX
    return model.cls(hidden[selected]), labels[selected]


def mlm_loss(model, batch: dict) -> torch.Tensor:
    """The MLM loss of `model(**batch).loss` (mean cross-entropy over targets), with the gathered head."""
    logits, targets = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS])
    if targets.numel() == 0:  # no target in the batch: a zero that still backpropagates
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), targets)


@torch.no_grad()
def evaluate(model, loader, device: torch.device, max_batches: int) -> dict:
    """MLM loss and top-1 accuracy over the selected positions of up to max_batches batches."""
    model.eval()
    loss_sum, correct, targets = 0.0, 0, 0
    for i, batch in enumerate(loader):
        if max_batches and i >= max_batches:
            break
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast(device):
            logits, labels = target_logits(model, batch[INPUT_IDS], batch[ATTENTION_MASK], batch[LABELS])
        loss_sum += F.cross_entropy(logits.float(), labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        targets += int(labels.numel())
    model.train()
    return {"eval_loss": loss_sum / max(targets, 1), "eval_accuracy": correct / max(targets, 1),
            "eval_targets": targets}


def autocast(device: torch.device):
    """bf16 autocast on CUDA, plain fp32 elsewhere."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def save_checkpoint(path: str, state: dict) -> None:
    """Atomic: a killed save never leaves a half-written checkpoint under the final name."""
    temp = path + ".partial"
    torch.save(state, temp)
    os.replace(temp, path)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


def hf_tokenizer(spec, model_max_length: int):
    """A transformers fast tokenizer from the tokenizer copy stored with the data, with the model's
    length: saved with the model, `AutoTokenizer` and `pipeline("fill-mask")` then truncate long
    texts to the positions the model has instead of overflowing them."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(spec.json)
    unk = json.loads(spec.json).get("model", {}).get("unk_token")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=unk, cls_token=tok.id_to_token(spec.cls_id),
        sep_token=tok.id_to_token(spec.sep_id), pad_token=tok.id_to_token(spec.pad_id),
        mask_token=tok.id_to_token(spec.mask_id), model_max_length=model_max_length,
    )


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
