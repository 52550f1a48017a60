"""Counter-based 64-bit hashing: content keys, row keys, mask seeds and the split assignment.

Everything random in MaskBeam is a pure function of (global seed, content), never of a worker,
bundle, batch or clock, so output is identical whatever the runner does. The mixer is splitmix64's
finaliser (Steele et al., 2014), cheap enough to evaluate per token inside the masking kernel.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pipeline.kernels.common.jit import kernel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)

# FNV-1a over bytes: what the WordPiece vocabulary table and the MinHash word hashes key on.
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)

SEED_SALT = np.uint64(0x5EED5EED5EED5EED)
SPLIT_SALT = np.uint64(0x5B117A55A1A7E5EE)
UNIT_INTERVAL_BITS = 53  # uniform draws use the top 53 bits of a hash


@kernel()
def mix64(x):
    """splitmix64: a bijective avalanche of one uint64 (scalar, usable inside other kernels)."""
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@kernel()
def _mix64_array(values, salt):
    out = np.empty(values.shape[0], dtype=np.uint64)
    for i in range(values.shape[0]):
        out[i] = mix64(values[i] ^ salt)
    return out


def mix64_array(values: np.ndarray, salt: int = 0) -> np.ndarray:
    """mix64(values ^ salt) elementwise. values: uint64, shape (n,)."""
    values = np.ascontiguousarray(values, dtype=np.uint64)
    return _mix64_array(values, np.uint64(salt))


def draw_threshold(p: float, bits: int) -> np.uint64:
    """Integer threshold t such that a uniform `bits`-bit draw u satisfies `u < t` with probability
    p (rounded to a multiple of 2**-bits)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {p}")
    return np.uint64(round(p * (1 << bits)))


def probability_threshold(p: float) -> np.uint64:
    """Integer threshold t such that `(hash >> 11) < t` happens with probability p."""
    return draw_threshold(p, UNIT_INTERVAL_BITS)


def content_digest(text: str) -> str:
    """sha256 hex of the UTF-8 text: the content key of a document."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def digest_to_u64(hex_digest: str) -> np.uint64:
    return np.uint64(int(hex_digest[:16], 16))


def row_keys(document_key: np.uint64, n_rows: int, first: int = 0) -> np.ndarray:
    """Key of each row: a hash of (document content key, chunk index), for chunks first..first+n_rows-1.
    uint64, shape (n_rows,)."""
    chunk_index = np.arange(first, first + n_rows, dtype=np.uint64)
    return mix64_array(mix64_array(chunk_index) ^ np.uint64(document_key))


def mask_seeds(keys: np.ndarray, seed: int) -> np.ndarray:
    """The 64-bit mask seed of each row from its key and the global `--seed`."""
    seed_key = int(mix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ SEED_SALT))
    return mix64_array(keys, seed_key)


def validation_rows(keys: np.ndarray, fraction: float) -> np.ndarray:
    """bool mask of the rows assigned to validation. Independent of `--seed` on purpose:
    changing the masking seed never moves rows between splits."""
    hashed = mix64_array(keys, int(SPLIT_SALT))
    return (hashed >> _S11) < probability_threshold(fraction)


SHORT_SALT = np.uint64(0x5407757407757407)


def short_row_targets(document_key: np.uint64, n_rows: int, probability: float, width: int) -> np.ndarray:
    """BERT's short_seq_prob: for each row slot, 0 (a full row) or, with `probability`, a shorter
    target drawn uniformly from [2, width]. A function of the document's content key only."""
    if n_rows == 0 or probability <= 0:
        return np.zeros(n_rows, dtype=np.int32)
    draws = mix64_array(np.arange(n_rows, dtype=np.uint64) ^ np.uint64(document_key), int(SHORT_SALT))
    short = (draws >> _S11) < probability_threshold(probability)
    lengths = 2 + (mix64_array(draws) % np.uint64(max(width - 1, 1))).astype(np.int64)
    return np.where(short, lengths, 0).astype(np.int32)
