"""What a `jobs.train` run saves in transformers' format: the final model with a matching fast
tokenizer (so `AutoModelForMaskedLM`, `AutoTokenizer` and `pipeline("fill-mask")` load the folder),
and with --save_pretrained_every the same every N steps in OUTPUT/checkpoint-STEP/ (HF `Trainer`'s
folder name; the resumable state stays in checkpoint.pt)."""

from __future__ import annotations

import inspect
import os
import re
import shutil

from schemas import manifest as m
from schemas.options import SPECIAL_CLS, SPECIAL_PAD, SPECIAL_SEP


def hf_tokenizer(spec, model_max_length: int, model=None):
    """A transformers fast tokenizer from the tokenizer copy stored with the data, with the model's
    length: saved with the model, `AutoTokenizer` and `pipeline("fill-mask")` then truncate long
    texts to the positions the model has instead of overflowing them. Models without token types
    (RoBERTa-style, DistilBERT, ModernBERT) get no `token_type_ids` input."""
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


def save_model(model, spec, seq_len: int, folder: str):
    """The model and its tokenizer in `folder`; returns the tokenizer."""
    model.save_pretrained(folder)
    tokenizer = hf_tokenizer(spec, seq_len, model)
    tokenizer.save_pretrained(folder)
    return tokenizer


EXPORT_PREFIX = "checkpoint-"
EXPORT_FOLDER = re.compile(r"checkpoint-(\d+)")  # and its .partial while written


def exports(output: str) -> list[tuple[int, str]]:
    """The (step, folder) of the checkpoint-STEP/ exports in `output`, oldest first."""
    found = [(int(m.group(1)), os.path.join(output, name)) for name in os.listdir(output)
             if (m := EXPORT_FOLDER.fullmatch(name)) and os.path.isdir(os.path.join(output, name))]
    return sorted(found)


def export_model(model, spec, seq_len: int, output: str, step: int, keep: int) -> str:
    """The model and tokenizer of `step` in OUTPUT/checkpoint-STEP/ (written beside it, then renamed:
    a killed export leaves no half folder under that name), keeping the newest `keep` exports."""
    folder = os.path.join(output, f"{EXPORT_PREFIX}{step}")
    partial = folder + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    save_model(model, spec, seq_len, partial)
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(partial, folder)
    for _, older in exports(output)[:-keep]:
        shutil.rmtree(older)
    return folder


def drop_exports_after(output: str, step: int) -> None:
    """On resume, remove the exports a killed run wrote after its checkpoint's `step` (the resumed run
    writes them again), and any half-written one."""
    for saved, folder in exports(output):
        if saved > step:
            shutil.rmtree(folder)
    for name in os.listdir(output):
        if name.startswith(EXPORT_PREFIX) and name.endswith(".partial"):
            shutil.rmtree(os.path.join(output, name), ignore_errors=True)
