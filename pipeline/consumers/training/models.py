"""Masked-LM models for `jobs.train`: any architecture of transformers by name or folder
(`AutoModelForMaskedLM`), from-scratch configs sized tiny..base for each supported family, the
vocabulary checked against the data's tokenizer, and the MLM head run only at the target positions.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import torch

from pipeline.tokenizer.spec import TokenizerSpec
from schemas.options import ARCHITECTURES, MODEL_SIZE_NAMES

_log = logging.getLogger("maskbeam.train")

# Sizes for from-scratch models: hidden, layers, heads, intermediate. ModernBERT's base is its own
# published shape (22 layers, a GLU of 1152); the other sizes are the BERT ladder.
MODEL_SIZES = dict(zip(MODEL_SIZE_NAMES, ((128, 2, 2, 512), (256, 4, 4, 1024), (512, 4, 8, 2048),
                                         (768, 12, 12, 3072))))
MODERNBERT_SIZES = {**MODEL_SIZES, "tiny": (128, 3, 2, 192), "mini": (256, 6, 4, 384), "small": (512, 9, 8, 768),
                    "base": (768, 22, 12, 1152)}

# The encoder attribute and the MLM head of each family: the head runs on the gathered hidden states.
# Families not listed run the full head (`model(...).logits`) and gather the logits: correct, slower.
_HEADS: dict[str, tuple[str, Callable]] = {
    "bert": ("bert", lambda m, h: m.cls(h)),
    "roberta": ("roberta", lambda m, h: m.lm_head(h)),
    "xlm-roberta": ("roberta", lambda m, h: m.lm_head(h)),
    "camembert": ("roberta", lambda m, h: m.lm_head(h)),
    "modernbert": ("model", lambda m, h: m.decoder(m.head(h))),
    "distilbert": ("distilbert",
                   lambda m, h: m.vocab_projector(m.vocab_layer_norm(m.activation(m.vocab_transform(h))))),
    "electra": ("electra", lambda m, h: m.generator_lm_head(m.generator_predictions(h))),
}


def scratch_config(arch: str, size: str, spec: TokenizerSpec, seq_len: int):
    """A transformers config of family `arch` at `size` for the data's tokenizer and row length."""
    from transformers import AutoConfig

    if arch not in ARCHITECTURES:
        raise ValueError(f"--arch must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")
    if size not in MODEL_SIZES:
        raise ValueError(f"--config must be one of {', '.join(MODEL_SIZES)}, got {size!r}")
    hidden, layers, heads, inner = (MODERNBERT_SIZES if arch == "modernbert" else MODEL_SIZES)[size]
    ids = {"vocab_size": spec.vocab_size, "pad_token_id": spec.pad_id}
    if arch == "distilbert":
        return AutoConfig.for_model("distilbert", dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=inner,
                                    max_position_embeddings=max(512, seq_len), **ids)
    common = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": inner, **ids}
    if arch == "bert":
        return AutoConfig.for_model("bert", max_position_embeddings=max(512, seq_len), **common)
    if arch == "electra":  # the generator of ELECTRA: an MLM whose embeddings may be narrower than hidden
        return AutoConfig.for_model("electra", embedding_size=hidden, max_position_embeddings=max(512, seq_len),
                                    **common)
    if arch in ("roberta", "xlm-roberta"):  # positions start after the padding index
        return AutoConfig.for_model(arch, max_position_embeddings=seq_len + spec.pad_id + 1, type_vocab_size=1,
                                    bos_token_id=spec.cls_id, eos_token_id=spec.sep_id, **common)
    return AutoConfig.for_model("modernbert", max_position_embeddings=max(512, seq_len), bos_token_id=spec.cls_id,
                                eos_token_id=spec.sep_id, cls_token_id=spec.cls_id, sep_token_id=spec.sep_id,
                                **common)


def attention_implementation(model_type: str, device: torch.device) -> str:
    """flash_attention_2 for ModernBERT on CUDA when flash-attn is installed (transformers then
    unpads the rows from the attention mask, ModernBERT's design), else sdpa."""
    if model_type == "modernbert" and device.type == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return "sdpa"


# The config fields of each dropout flag: hidden (embeddings and layers) and attention probabilities.
_DROPOUT_FIELDS = {
    "hidden": ("hidden_dropout_prob", "dropout", "embedding_dropout", "mlp_dropout"),
    "attention": ("attention_probs_dropout_prob", "attention_dropout"),
}


def set_dropout(config, *, hidden: float | None = None, attention: float | None = None) -> None:
    """Set the dropout of `config` by whatever names its family gives it (BERT's hidden_dropout_prob
    and attention_probs_dropout_prob, DistilBERT's dropout and attention_dropout, ModernBERT's
    embedding_dropout, mlp_dropout and attention_dropout); None leaves it as it is.

    Raises:
        ValueError: the family has no config field for the dropout asked for."""
    for kind, value in (("hidden", hidden), ("attention", attention)):
        if value is None:
            continue
        names = [name for name in _DROPOUT_FIELDS[kind] if hasattr(config, name)]
        if not names:
            raise ValueError(f"--{kind}_dropout: a {config.model_type} config has none of "
                             f"{', '.join(_DROPOUT_FIELDS[kind])}; leave the flag out for this model")
        for name in names:
            setattr(config, name, value)


def build_model(spec: TokenizerSpec, seq_len: int, device: torch.device, *, model: str | None = None,
                arch: str = "bert", size: str = "tiny", hidden_dropout: float | None = None,
                attention_dropout: float | None = None, gradient_checkpointing: bool = False):
    """A masked-LM model: `model` (a Hub name or folder, any AutoModelForMaskedLM architecture,
    checked against the data's tokenizer) or a from-scratch `arch` at `size`; the dropouts set where
    given (`set_dropout`), and with `gradient_checkpointing` each layer's activations recomputed in
    the backward pass (transformers' non-reentrant checkpointing: DDP and no_sync work with it)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    config = AutoConfig.from_pretrained(model) if model else scratch_config(arch, size, spec, seq_len)
    if model:
        check_vocabulary(model, config, spec)
    set_dropout(config, hidden=hidden_dropout, attention=attention_dropout)
    if model:
        def load(attempt):
            return AutoModelForMaskedLM.from_pretrained(model, config=config, attn_implementation=attempt)
    else:
        def load(attempt):
            return AutoModelForMaskedLM.from_config(config, attn_implementation=attempt)
    built = with_attention_fallback(load, attention_implementation(config.model_type, device), config.model_type)
    if gradient_checkpointing:
        if not built.supports_gradient_checkpointing:
            raise ValueError(f"--gradient_checkpointing: transformers' {type(built).__name__} does not support it; "
                             "leave the flag out for this model")
        enable = getattr(built, "activation_checkpointing_enable", None)  # transformers 5's name
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            built.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return built


def with_attention_fallback(load, first: str, model_type: str):
    """`load(implementation)` with `first`, then sdpa, then eager: the first that the family (and the
    installed kernels: a broken flash-attn raises on load) supports."""
    attempts = list(dict.fromkeys((first, "sdpa", "eager")))
    for attempt, fallback in zip(attempts, attempts[1:] + [None]):
        try:
            return load(attempt)
        except (ValueError, ImportError) as error:  # the family has no such attention implementation
            if fallback is None or "attn" not in str(error).lower() and "attention" not in str(error).lower():
                raise
            _log.info("%s: %s attention unavailable (%s), using %s", model_type, attempt, error, fallback)
    raise AssertionError("unreachable")


def check_vocabulary(model: str, config, spec: TokenizerSpec) -> None:
    """The model's embeddings must cover the data's ids, and where the model folder has its own
    tokenizer, its tokens must be the data's (same token, same id)."""
    if config.vocab_size < spec.vocab_size or (config.vocab_size != spec.vocab_size and not _has_tokenizer(model)):
        raise ValueError(f"model {model!r} has a vocabulary of {config.vocab_size} ids but the data was tokenized "
                         f"with {spec.vocab_size}: use the model's own tokenizer for preprocessing")
    if _has_tokenizer(model):
        from tokenizers import Tokenizer

        theirs = Tokenizer.from_file(os.path.join(model, "tokenizer.json")).get_vocab(with_added_tokens=True)
        ours = Tokenizer.from_str(spec.json).get_vocab(with_added_tokens=True)
        differ = sorted(tok for tok in ours.keys() | theirs.keys() if ours.get(tok) != theirs.get(tok))
        if differ:
            tok = differ[0]
            raise ValueError(f"model {model!r} has another tokenizer than the data: {len(differ)} tokens differ, "
                             f"e.g. {tok!r} is id {theirs.get(tok)} in the model's and {ours.get(tok)} in the "
                             "data's; use the model's own tokenizer for preprocessing")
    pad = getattr(config, "pad_token_id", None)
    if pad is not None and pad != spec.pad_id:
        raise ValueError(f"model {model!r} pads with id {pad} but the data pads with {spec.pad_id}")


def _has_tokenizer(model: str) -> bool:
    return os.path.isfile(os.path.join(model, "tokenizer.json"))


def encoder_and_head(model) -> tuple[torch.nn.Module, Callable] | None:
    """The encoder and the head function of a known family, or None (full head)."""
    found = _HEADS.get(getattr(model.config, "model_type", ""))
    if found is None or not hasattr(model, found[0]):
        return None
    return getattr(model, found[0]), lambda hidden: found[1](model, hidden)
