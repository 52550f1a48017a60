"""The config of jobs.train: every option, its default and its help, in one dataclass saved with each
run and checkpoint. Standard library only, so the command line is parsed and checked before torch or
transformers is imported."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from schemas.options import ARCHITECTURES, DEFAULT_READ_MODE, MODEL_SIZE_NAMES, READ_MODES

PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # precision.py resolves them (torch is not imported here)
REPORTERS = ("tensorboard", "wandb")  # --report_to (reporting.py opens them)
GPU_WORKERS = 2  # --num_workers on a GPU when not given


def reporters(report_to: str) -> list[str]:
    """The names in a --report_to value ("none" and "" name none)."""
    names = [name.strip() for name in report_to.split(",") if name.strip()]
    return [] if names in ([], ["none"]) else names


def _opt(default, help: str, **extra):
    """A dataclass field that is also a documented command-line flag of jobs.train."""
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TrainConfig:
    """Every option of jobs.train (each is the flag of the same name), saved in train_config.json and
    in each checkpoint."""

    data: str = _opt("", "a MaskBeam output folder (or an s3://, gs://, hf:// URL); required")
    output: str = _opt("", "the run folder: checkpoint, metrics, log and the final model; required")
    model: str | None = _opt(None, "start from this model: a Hub name or a folder of any masked-LM architecture of "
                                   "transformers (its tokenizer must be the data's); default: a new model")
    arch: str = _opt("bert", "architecture of a new model", choices=ARCHITECTURES)
    config: str = _opt("tiny", "size of a new model", choices=MODEL_SIZE_NAMES)
    batch_size: int = _opt(32, "rows per micro-batch on each rank")
    grad_accum: int = _opt(1, "micro-batches per optimizer step on each rank (a step sees batch_size x grad_accum"
                              " x ranks rows)")
    lr: float = _opt(5e-4, "peak learning rate")
    adam_beta1: float = _opt(0.9, "AdamW's beta1 (HF Trainer's name)")
    adam_beta2: float = _opt(0.999, "AdamW's beta2 (HF Trainer's name)")
    adam_epsilon: float = _opt(1e-8, "AdamW's epsilon (HF Trainer's name)")
    weight_decay: float = _opt(0.01, "AdamW weight decay, on the weights only (not biases or LayerNorm, as in "
                                          "HF Trainer)")
    warmup_steps: int = _opt(100, "steps of linear warmup; longer than the run: clipped to a tenth of the run, "
                                  "with a warning")
    schedule: str = _opt("linear", "after the warmup: linear or cosine decay to 0, constant, or wsd (constant, then "
                                   "linear decay to 0 over the last --decay_fraction of the run)",
                         choices=("linear", "cosine", "constant", "wsd"))
    decay_fraction: float = _opt(0.1, "--schedule wsd: the share of the run's steps its decay takes")
    min_lr_ratio: float = _opt(0.0, "the floor of the linear, cosine and wsd decays, as a share of --lr (HF's "
                                    "cosine_with_min_lr: 0.1 decays to a tenth of the peak instead of 0)")
    max_steps: int | None = _opt(None, "optimizer steps to run; default: --epochs epochs")
    epochs: int = _opt(1, "epochs to run when --max_steps is not given")
    max_tokens: int = _opt(0, "end the run (saved, evaluated) after the step that brings the real tokens trained "
                              "on, over all ranks and resumes, to this (0: no limit); the LR schedule still counts "
                              "--max_steps or --epochs")
    max_minutes: float = _opt(0.0, "end the run (saved, evaluated) after the step during which this many minutes of "
                                   "training steps have passed in this invocation (0: no limit): within a "
                                   "scheduler's time limit, leaving time for the final evaluation and save")
    max_grad_norm: float = _opt(1.0, "clip the gradient norm to this (0: no clipping; the norm is logged as "
                                     "grad_norm either way)")
    eval_every: int = _opt(0, "steps between evaluations (0: only before and after training)")
    eval_rows: int = _opt(2048, "validation rows per evaluation: a fixed sample spread over the whole split, the "
                                "same rows and loss whatever --batch_size, the ranks or a resume (0: the whole split)")
    save_every: int = _opt(500, "steps between checkpoints (0: by --save_minutes only); one is also saved at the end "
                                "and when interrupted")
    save_minutes: float = _opt(30.0, "minutes between checkpoints, whichever of this and --save_every comes first "
                                     "(0: by --save_every only)")
    save_total_limit: int = _opt(1, "checkpoints kept: checkpoint.pt (the latest) and the N-1 before it as "
                                    "checkpoint-STEP.pt; also the --save_pretrained_every exports kept")
    save_pretrained_every: int = _opt(0, "steps between exports in transformers' format, checkpoint-STEP/ folders "
                                         "of model and tokenizer files (AutoModelForMaskedLM.from_pretrained loads "
                                         "them), the newest --save_total_limit kept (0: only the final model)")
    report_to: str = _opt("none", "also send the metrics.jsonl rows to: tensorboard (event files in "
                                  "OUTPUT/tensorboard), wandb (when installed; WANDB_MODE=offline works without "
                                  "an account), both comma-separated, or none")
    seed: int = _opt(0, "seed of the initialisation, dropout and sample order")
    num_workers: int | None = _opt(None, "DataLoader worker processes per rank; default: 2 on a GPU (masking and "
                                         "batching overlap the step; the loader makes about 13,000 rows of 512 per "
                                         "CPU-second, BERT-base on an H200 takes about 2,700), 0 on the CPU (where "
                                         "workers would take the cores the step computes on)")
    precision: str = _opt("auto", "bf16, fp16 (with a loss scaler) or fp32; auto: bf16 on GPUs that compute it "
                                  "natively, fp16 on those that would emulate it (V100, T4), fp32 on the CPU; TF32 "
                                  "for fp32 matrix products on CUDA", choices=PRECISIONS)
    hidden_dropout: float | None = _opt(None, "dropout of the embeddings and hidden layers (BERT's "
                                              "hidden_dropout_prob, DistilBERT's dropout, ModernBERT's embedding and "
                                              "MLP dropout); "
                                              "default: the model's own (0.1 for a new BERT, 0 for ModernBERT)")
    attention_dropout: float | None = _opt(None, "dropout of the attention probabilities (BERT's "
                                                 "attention_probs_dropout_prob, attention_dropout elsewhere); default: "
                                                 "the model's own")
    gradient_checkpointing: bool = _opt(False, "recompute each layer's activations in the backward pass instead of "
                                               "keeping them (transformers' gradient_checkpointing_enable): about a "
                                               "third more compute for much less activation memory")
    compile: bool = _opt(False, "torch.compile the loss (the first steps compile)")
    resume: bool = _opt(False, "continue the run in --output from its checkpoint, on any number of ranks")
    overwrite: bool = _opt(False, "replace the jobs.train run in --output")
    probe: str | None = _opt(None, "a text file of sentences with the mask token (e.g. [MASK]): the top "
                                   "predictions of each are printed at the end")
    plot: str | None = _opt(None, "write loss and accuracy curves to this PNG file")
    trim_padding: bool = _opt(True, "cut each batch after its longest row (rounded up to 8)",
                              off_help="keep every batch at the data's full sequence length (default: each batch "
                                       "is cut after its longest row, rounded up to 8)")
    log_every: int = _opt(10, "steps between progress lines in the log when stdout is not a terminal (0: none)")
    log_samples: bool = _opt(False, "write each step's dataset indices to samples-rank{R}.jsonl (an audit trail)")
    cache_dir: str | None = _opt(None, "where the shards of a remote --data are copied; default "
                                       "~/.cache/maskbeam/shards")
    cache_limit: int | None = _opt(None, "bytes the shard cache may hold, older copies evicted; default: no limit")
    read_mode: str = _opt(DEFAULT_READ_MODE, "how rows leave the shards: pread (RSS holds only batches) or mmap",
                          choices=READ_MODES)

    def save(self, path: str) -> None:
        with open(path, "w") as handle:
            json.dump(asdict(self), handle, indent=2, sort_keys=True)
