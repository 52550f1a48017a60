"""Output layout, file names, the manifest format and the `datasets` side files (state, info, dict)."""

from __future__ import annotations

import hashlib
import json

MANIFEST_VERSION = 1
MANIFEST_FILE = "manifest.json"
DATASET_DICT_FILE = "dataset_dict.json"
STATE_FILE = "state.json"
DATASET_INFO_FILE = "dataset_info.json"
TEMP_DIR = ".maskbeam-tmp"
SHARD_NAME_TEMPLATE = "data-{index:05d}-of-{count:05d}.arrow"
PARTIAL_SUFFIX = ".partial"

TRAIN = "train"
VALIDATION = "validation"
SPLITS = (TRAIN, VALIDATION)

TARGET_SHARD_BYTES = 256 * 1024 * 1024

# Count names, shared by the per-input results, the Beam metrics and the manifest.
FILES_READ = "files_read"
FILES_SKIPPED = "files_skipped"
FILES_SKIPPED_BY_REASON = "files_skipped_by_reason"
RECORDS_SKIPPED = "records_skipped"
DOCUMENTS = "documents"
DOCUMENTS_TOO_SHORT = "documents_too_short"
TOKENS = "tokens"
UNK_TOKENS = "unk_tokens"
ROWS = "rows"
SHORT_ROWS_DROPPED = "short_rows_dropped"
TOKENS_DROPPED = "tokens_dropped"
REPLACED_BYTES = "replaced_bytes"
BOILERPLATE_CHARS_REMOVED = "boilerplate_chars_removed"
CHARACTERS = "characters"  # characters of cleaned text kept
KEY_BOILERPLATE_SHARE = "boilerplate_share"  # per input: share of its characters cut as header/licence
SELECTED = "selected"
MASKED = "masked"
RANDOM = "random"
UNCHANGED = "unchanged"
MASK_COUNT_NAMES = (SELECTED, MASKED, RANDOM, UNCHANGED)
INPUT_COUNT_NAMES = (
    FILES_READ,
    FILES_SKIPPED,
    RECORDS_SKIPPED,
    DOCUMENTS,
    DOCUMENTS_TOO_SHORT,
    TOKENS,
    UNK_TOKENS,
    ROWS,
    SHORT_ROWS_DROPPED,
    TOKENS_DROPPED,
    REPLACED_BYTES,
    BOILERPLATE_CHARS_REMOVED,
    CHARACTERS,
)

# Manifest keys.
KEY_VERSION = "manifest_version"
KEY_PACKAGE_VERSION = "package_version"
KEY_CONFIG = "config"
KEY_TOKENIZER = "tokenizer"
KEY_COUNTS = "counts"
KEY_SPLITS = "splits"
KEY_SKIPPED = "skipped"
KEY_INPUTS = "inputs"
KEY_SHARDS = "shards"
KEY_FILENAME = "filename"
KEY_ROWS = "rows"
KEY_BYTES = "bytes"
KEY_SHA256 = "sha256"
KEY_PATH = "path"
KEY_REASON = "reason"
KEY_SIZE = "size"  # per input: its size in bytes when read (what --resume compares)
KEY_MASK_COUNTS = "mask_counts"
KEY_PLAN = "plan_sha256"
KEY_DUPLICATES = "duplicates"
KEY_DUPLICATE_OF = "duplicate_of"
KEY_NEAR_DUPLICATES = "near_duplicates"  # [{path, near_duplicate_of, similarity}], similarity >= 0.5
KEY_NEAR_DUPLICATE_OF = "near_duplicate_of"
KEY_SIMILARITY = "similarity"
KEY_UNK_FRACTION = "unk_fraction"  # per input: share of [UNK] among its content tokens
KEY_SCRIPTS = "scripts"  # per input: share of its letters per Unicode script
KEY_DOMINANT_SCRIPT = "dominant_script"
RUN_FILE = "run.json"  # the config of a run in progress, in TEMP_DIR (what --resume compares)
KEY_MASK_COUNTS_EPOCH = "mask_counts_epoch"
KEY_NEVER_SELECTED = "never_selected_ids"
KEY_NEVER_REPLACEMENT = "never_replacement_ids"
KEY_CONTINUATION = "word_continuation_ids"
KEY_MASK_ID = "mask"
KEY_SPECIAL_IDS = "special_ids"
KEY_VOCAB_SIZE = "vocab_size"
KEY_NAME_OR_PATH = "name_or_path"
TOKENIZER_FILE = "tokenizer.json"  # a copy of the tokenizer travels with the data


def shard_name(index: int, count: int) -> str:
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside [0, {count})")
    return SHARD_NAME_TEMPLATE.format(index=index, count=count)


def shard_record_name(split: str, filename: str) -> str:
    """Name (in TEMP_DIR) of the record a finished shard leaves for --resume."""
    return f"shard-{split}-{filename}.json"


def dataset_info(features: dict) -> dict:
    """`dataset_info.json` as `datasets.save_to_disk` writes it."""
    return {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}


def dataset_state(split: str, filenames: list[str], shard_sha256: list[str]) -> dict:
    """`state.json`; the fingerprint is derived from the shard checksums so it is deterministic."""
    fingerprint = hashlib.sha256("".join(shard_sha256).encode()).hexdigest()[:16]
    return {
        "_data_files": [{"filename": name} for name in filenames],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": split,
    }


def dataset_dict(splits: tuple[str, ...] = SPLITS) -> dict:
    return {"splits": list(splits)}


def dumps(obj: dict) -> str:
    """The one JSON encoding of every side file: sorted keys, stable across runs."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
