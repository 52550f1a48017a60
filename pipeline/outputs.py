"""Read what a preprocess run wrote: the manifest, the shard list, the tokenizer copy and the
masking rule, so consumers need nothing but the output folder."""

from __future__ import annotations

import json
import posixpath

from apache_beam.io.filesystems import FileSystems

from pipeline.arrow_io import read_text
from pipeline.masking import MaskingRule
from pipeline.tokenization import TokenizerSpec
from schemas import manifest as m


class NotAnOutput(FileNotFoundError):
    """The folder is not a complete MaskBeam output."""


def load_manifest(directory: str) -> dict:
    """The manifest of a complete output.

    Raises:
        NotAnOutput: when there is no manifest.json (missing, or the run did not finish).
    """
    path = posixpath.join(directory, m.MANIFEST_FILE)
    if not FileSystems.exists(path):
        raise NotAnOutput(f"{directory!r} has no {m.MANIFEST_FILE}: not a complete MaskBeam output")
    return json.loads(read_text(path))


def shard_paths(directory: str, manifest: dict, split: str) -> list[str]:
    if split not in manifest[m.KEY_SPLITS]:
        raise ValueError(f"split {split!r} not in {sorted(manifest[m.KEY_SPLITS])}")
    return [posixpath.join(directory, split, s[m.KEY_FILENAME]) for s in manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]]


def masking_rule(manifest: dict) -> MaskingRule:
    """The masking rule the data was made with, from the manifest alone."""
    tok, config = manifest[m.KEY_TOKENIZER], manifest[m.KEY_CONFIG]
    return MaskingRule.from_ids(tok[m.KEY_VOCAB_SIZE], tok[m.KEY_NEVER_SELECTED], tok[m.KEY_NEVER_REPLACEMENT],
                                tok[m.KEY_SPECIAL_IDS][m.KEY_MASK_ID], config["mlm_probability"],
                                config["mask_replace_prob"], config["random_replace_prob"],
                                unit=config.get("masking_unit", "token"),
                                continuation_ids=tok.get(m.KEY_CONTINUATION, []),
                                span_p=config.get("span_p", 0.2), max_span=config.get("max_span", 10))


def tokenizer_spec(directory: str) -> TokenizerSpec:
    """The tokenizer copy stored with the data."""
    path = posixpath.join(directory, m.TOKENIZER_FILE)
    if not FileSystems.exists(path):
        raise NotAnOutput(f"{directory!r} has no {m.TOKENIZER_FILE}")
    return TokenizerSpec.from_json(read_text(path))
