"""Columns, dtypes and the Arrow schema / `datasets` features of training shards and work parts."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
LABELS = "labels"
MASK_SEED = "mask_seed"

# The intermediate per-input parts (never seen by users) hold INPUT_IDS, PART_LENGTH and MASK_SEED.
PART_LENGTH = "length"  # number of real tokens in the row, [CLS] and [SEP] included

DEFAULT_SEQ_LEN = 512
MIN_SEQ_LEN = 8
IGNORE_INDEX = -100
ATTENTION_DTYPE = np.dtype(np.int8)
MASK_SEED_DTYPE = np.dtype(np.uint64)
LENGTH_DTYPE = np.dtype(np.int32)
ROWS_PER_RECORD_BATCH = 1000  # what `datasets` itself writes

MASKING_STATIC = "static"
MASKING_DYNAMIC = "dynamic"
MASKING_MODES = (MASKING_STATIC, MASKING_DYNAMIC)


def id_dtype_for_vocab(vocab_size: int) -> np.dtype:
    """Narrowest signed integer dtype holding every id and the label IGNORE_INDEX (-100)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    for dtype in (np.int16, np.int32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError(f"vocab_size {vocab_size} does not fit in int32")


def shard_columns(masking: str) -> tuple[str, ...]:
    """Column order of a training shard for a masking mode."""
    if masking == MASKING_STATIC:
        return (INPUT_IDS, ATTENTION_MASK, LABELS)
    if masking == MASKING_DYNAMIC:
        return (INPUT_IDS, ATTENTION_MASK, MASK_SEED)
    raise ValueError(f"masking must be one of {MASKING_MODES}, got {masking!r}")


def _value(dtype: np.dtype) -> dict:
    return {"dtype": np.dtype(dtype).name, "_type": "Value"}


def _fixed_list(dtype: np.dtype, length: int) -> dict:
    return {"feature": _value(dtype), "length": length, "_type": "List"}


def shard_features(masking: str, seq_len: int, id_dtype: np.dtype) -> dict:
    """The `datasets` features of a shard, in the JSON form `datasets.Features.to_dict()` gives."""
    types = {
        INPUT_IDS: _fixed_list(id_dtype, seq_len),
        ATTENTION_MASK: _fixed_list(ATTENTION_DTYPE, seq_len),
        LABELS: _fixed_list(id_dtype, seq_len),
        MASK_SEED: _value(MASK_SEED_DTYPE),
    }
    return {name: types[name] for name in shard_columns(masking)}


def _arrow_type(dtype: np.dtype, seq_len: int | None) -> pa.DataType:
    value = pa.from_numpy_dtype(np.dtype(dtype))
    return value if seq_len is None else pa.list_(value, seq_len)


def shard_schema(masking: str, seq_len: int, id_dtype: np.dtype) -> pa.Schema:
    """Arrow schema of a shard, with the `huggingface` metadata `datasets` reads its features from."""
    types = {
        INPUT_IDS: _arrow_type(id_dtype, seq_len),
        ATTENTION_MASK: _arrow_type(ATTENTION_DTYPE, seq_len),
        LABELS: _arrow_type(id_dtype, seq_len),
        MASK_SEED: _arrow_type(MASK_SEED_DTYPE, None),
    }
    fields = [pa.field(name, types[name]) for name in shard_columns(masking)]
    meta = {"huggingface": json.dumps({"info": {"features": shard_features(masking, seq_len, id_dtype)}})}
    return pa.schema(fields, metadata=meta)


def part_schema(seq_len: int, id_dtype: np.dtype) -> pa.Schema:
    """Schema of the unmasked per-input parts the shard writers read back."""
    return pa.schema(
        [
            pa.field(INPUT_IDS, _arrow_type(id_dtype, seq_len)),
            pa.field(PART_LENGTH, _arrow_type(LENGTH_DTYPE, None)),
            pa.field(MASK_SEED, _arrow_type(MASK_SEED_DTYPE, None)),
        ]
    )


def validate_shard_schema(schema: pa.Schema, masking: str, seq_len: int, id_dtype: np.dtype) -> None:
    """Raise ValueError naming the first column whose name or type differs from the expected schema."""
    expected = shard_schema(masking, seq_len, id_dtype)
    if schema.names != expected.names:
        raise ValueError(f"shard columns: expected {expected.names}, got {schema.names}")
    for field in expected:
        actual = schema.field(field.name).type
        if actual != field.type:
            raise ValueError(f"column {field.name!r}: expected type {field.type}, got {actual}")
