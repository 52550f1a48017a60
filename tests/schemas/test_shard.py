import datasets
import numpy as np
import pyarrow as pa
import pytest

from schemas.shard import (
    MASKING_DYNAMIC,
    MASKING_STATIC,
    id_dtype_for_vocab,
    shard_features,
    shard_schema,
    validate_shard_schema,
)


@pytest.mark.parametrize("masking", [MASKING_STATIC, MASKING_DYNAMIC])
def test_features_match_datasets(masking):
    features = shard_features(masking, 512, np.dtype(np.int16))
    parsed = datasets.Features.from_dict(features)
    assert parsed.to_dict() == features
    assert parsed.arrow_schema.remove_metadata() == shard_schema(masking, 512, np.dtype(np.int16)).remove_metadata()
    assert datasets.Features.from_arrow_schema(shard_schema(masking, 512, np.dtype(np.int16))) == parsed


def test_narrowest_id_dtype():
    assert id_dtype_for_vocab(30522) == np.int16
    assert id_dtype_for_vocab(32768) == np.int16
    assert id_dtype_for_vocab(32769) == np.int32
    assert id_dtype_for_vocab(250_002) == np.int32
    with pytest.raises(ValueError):
        id_dtype_for_vocab(0)


def test_validate_names_the_column():
    schema = shard_schema(MASKING_STATIC, 512, np.dtype(np.int16))
    validate_shard_schema(schema, MASKING_STATIC, 512, np.dtype(np.int16))
    wrong = schema.set(2, pa.field("labels", pa.list_(pa.int32(), 512)))
    with pytest.raises(ValueError, match="'labels'"):
        validate_shard_schema(wrong, MASKING_STATIC, 512, np.dtype(np.int16))
