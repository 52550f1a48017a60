"""Read what a preprocess run wrote: the manifest, the shard list, the tokenizer copy and the
masking rule, so consumers need nothing but the output folder."""

from __future__ import annotations

import json

from pipeline.kernels.masking import MaskingRule
from pipeline.storage import filesystem
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas import options as o


class NotAnOutput(FileNotFoundError):
    """The folder is not a complete MaskBeam output."""


def load_manifest(directory: str) -> dict:
    """The manifest of a complete output.

    Raises:
        NotAnOutput: when there is no manifest.json (missing, or the run did not finish).
    """
    path = filesystem.join(directory, m.MANIFEST_FILE)
    if not filesystem.exists(path):
        raise NotAnOutput(f"{directory!r} has no {m.MANIFEST_FILE}: not a complete MaskBeam output")
    return json.loads(filesystem.read_text(path))


def shard_paths(directory: str, manifest: dict, split: str) -> list[str]:
    if split not in manifest[m.KEY_SPLITS]:
        raise ValueError(f"split {split!r} not in {sorted(manifest[m.KEY_SPLITS])}")
    return [filesystem.join(directory, split, s[m.KEY_FILENAME]) for s in manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]]


def masking_rule(manifest: dict) -> MaskingRule:
    """The masking rule the data was made with, from the manifest alone."""
    tok, config = manifest[m.KEY_TOKENIZER], manifest[m.KEY_CONFIG]
    return MaskingRule.from_ids(tok[m.KEY_VOCAB_SIZE], tok[m.KEY_NEVER_SELECTED], tok[m.KEY_NEVER_REPLACEMENT],
                                tok[m.KEY_SPECIAL_IDS][m.KEY_MASK_ID], config[o.MLM_PROBABILITY],
                                config[o.MASK_REPLACE_PROB], config[o.RANDOM_REPLACE_PROB],
                                unit=config.get(o.MASKING_UNIT, o.UNIT_TOKEN),
                                continuation_ids=tok.get(m.KEY_CONTINUATION, []),
                                span_p=config.get(o.SPAN_P, o.DEFAULT_SPAN_P),
                                max_span=config.get(o.MAX_SPAN, o.DEFAULT_MAX_SPAN))


def tokenizer_spec(directory: str) -> TokenizerSpec:
    """The tokenizer copy stored with the data."""
    path = filesystem.join(directory, m.TOKENIZER_FILE)
    if not filesystem.exists(path):
        raise NotAnOutput(f"{directory!r} has no {m.TOKENIZER_FILE}")
    return TokenizerSpec.from_json(filesystem.read_text(path))
