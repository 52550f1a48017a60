"""The MLM masking kernel: one function for static copies, dynamic epochs and the loader.

Rule (BERT): each non-special position is selected with probability `mlm_probability` (at least
one per row that has any eligible position); a selected position becomes `[MASK]` with probability
`mask_replace_prob`, a random ordinary token with `random_replace_prob`, else stays unchanged.
Labels hold the original id at selected positions and IGNORE_INDEX elsewhere.

Every draw is a counter-based hash of (row mask seed, epoch, position), so the mask of a row is a
pure function of (mask_seed, epoch): static copy k is bit-identical to dynamic epoch k, in any
process, whatever the batch the row arrives in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.hashing import mix64, probability_threshold
from pipeline.jit import kernel
from schemas.shard import IGNORE_INDEX

_EPOCH_SALT = np.uint64(0xE90C4E90C4E90C4E)
_CATEGORY_SALT = np.uint64(0xCA7E6021CA7E6021)
_FORCE_SALT = np.uint64(0xF02CEF02CEF02CE1)
_S11 = np.uint64(11)
_S32 = np.uint64(32)

# Indices into the counts array every masking call returns.
COUNT_SELECTED, COUNT_MASKED, COUNT_RANDOM, COUNT_UNCHANGED = range(4)


@dataclass(frozen=True)
class MaskingRule:
    """What the kernel needs to know about a vocabulary and the ratios.

    Attributes:
        is_special: bool, shape (vocab_size,): True for ids never selected ([CLS], [SEP], [PAD], ...).
        replacement_pool: int32, shape (P,): ids a random replacement is drawn from (ordinary tokens).
        mask_id: the `[MASK]` id.
        mlm_probability, mask_replace_prob, random_replace_prob: the 15/80/10 ratios.
    """

    is_special: np.ndarray
    replacement_pool: np.ndarray
    mask_id: int
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1

    def __post_init__(self) -> None:
        if self.is_special.dtype != np.bool_ or self.is_special.ndim != 1:
            raise TypeError(f"is_special must be a 1-D bool array, got {self.is_special.dtype} {self.is_special.shape}")
        if self.replacement_pool.dtype != np.int32 or self.replacement_pool.size == 0:
            raise TypeError("replacement_pool must be a non-empty int32 array")
        if self.is_special[self.replacement_pool].any():
            raise ValueError("replacement_pool contains special ids")
        if not 0 <= self.mask_id < self.is_special.size:
            raise ValueError(f"mask_id {self.mask_id} outside the vocabulary of {self.is_special.size}")
        check_probabilities(self.mlm_probability, self.mask_replace_prob, self.random_replace_prob)

    @property
    def vocab_size(self) -> int:
        return int(self.is_special.size)


def check_probabilities(mlm_probability: float, mask_replace_prob: float, random_replace_prob: float) -> None:
    """Raise ValueError unless all three lie in [0, 1] and the two replacement shares sum to <= 1."""
    for name, value in (
        ("mlm_probability", mlm_probability),
        ("mask_replace_prob", mask_replace_prob),
        ("random_replace_prob", random_replace_prob),
    ):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if mask_replace_prob + random_replace_prob > 1.0 + 1e-12:
        raise ValueError(
            f"mask_replace_prob + random_replace_prob must be <= 1, got "
            f"{mask_replace_prob} + {random_replace_prob} = {mask_replace_prob + random_replace_prob}"
        )


@kernel()
def _apply_target(j, h, orig, out_ids, out_labels, row, pool, mask_id, mask_thr, random_thr, counts):
    out_labels[row, j] = orig
    counts[0] += 1
    h2 = mix64(h ^ _CATEGORY_SALT)
    u = h2 >> _S11
    if u < mask_thr:
        out_ids[row, j] = mask_id
        counts[1] += 1
    elif u < random_thr:
        h3 = mix64(h2)
        k = ((h3 >> _S32) * np.uint64(pool.shape[0])) >> _S32
        out_ids[row, j] = pool[k]
        counts[2] += 1
    else:
        counts[3] += 1


@kernel()
def _mask_rows_kernel(ids, seeds, epoch, is_special, pool, mask_id, select_thr, mask_thr, random_thr,
                      out_ids, out_labels, counts):
    n_rows, seq_len = ids.shape
    epoch_key = mix64(epoch ^ _EPOCH_SALT)
    ignore = out_labels.dtype.type(IGNORE_INDEX)
    for row in range(n_rows):
        stream = mix64(seeds[row] ^ epoch_key)
        n_selected = 0
        n_eligible = 0
        for j in range(seq_len):
            t = ids[row, j]
            out_ids[row, j] = t
            out_labels[row, j] = ignore
            if is_special[t]:
                continue
            n_eligible += 1
            h = mix64(stream + np.uint64(j))
            if (h >> _S11) < select_thr:
                n_selected += 1
                _apply_target(j, h, t, out_ids, out_labels, row, pool, mask_id, mask_thr, random_thr, counts)
        if n_selected == 0 and n_eligible > 0:
            # At least one target per row: the k-th eligible position, k drawn from the stream.
            k = mix64(stream ^ _FORCE_SALT) % np.uint64(n_eligible)
            seen = np.uint64(0)
            for j in range(seq_len):
                t = ids[row, j]
                if is_special[t]:
                    continue
                if seen == k:
                    h = mix64(stream + np.uint64(j))
                    _apply_target(j, h, t, out_ids, out_labels, row, pool, mask_id, mask_thr, random_thr, counts)
                    break
                seen += np.uint64(1)


def mask_rows(ids: np.ndarray, seeds: np.ndarray, epoch: int, rule: MaskingRule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask a batch of rows for one epoch (or static copy).

    Args:
        ids: int16 or int32, shape (B, L): unmasked rows with their special tokens in place.
        seeds: uint64, shape (B,): each row's mask seed.
        epoch: the epoch (dynamic) or copy index (static), >= 0.
        rule: vocabulary facts and ratios.

    Returns:
        (masked ids like `ids`, labels like `ids` with IGNORE_INDEX off-target,
        int64 counts of shape (4,): selected, [MASK], random, unchanged).

    Raises:
        TypeError/ValueError: on a wrong dtype, shape, a negative epoch or an id outside the vocabulary.
    """
    if ids.ndim != 2 or ids.dtype not in (np.int16, np.int32):
        raise TypeError(f"ids must be a 2-D int16/int32 array, got {ids.dtype} with shape {ids.shape}")
    if seeds.dtype != np.uint64 or seeds.shape != (ids.shape[0],):
        raise TypeError(f"seeds must be uint64 of shape ({ids.shape[0]},), got {seeds.dtype} {seeds.shape}")
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rule.vocab_size):
        raise ValueError(f"ids must lie in [0, {rule.vocab_size}), got range [{ids.min()}, {ids.max()}]")
    ids = np.ascontiguousarray(ids)
    out_ids = np.empty_like(ids)
    out_labels = np.empty_like(ids)
    counts = np.zeros(4, dtype=np.int64)
    select_thr = probability_threshold(rule.mlm_probability)
    mask_thr = probability_threshold(rule.mask_replace_prob)
    random_thr = probability_threshold(min(1.0, rule.mask_replace_prob + rule.random_replace_prob))
    _mask_rows_kernel(ids, np.ascontiguousarray(seeds), np.uint64(epoch), rule.is_special, rule.replacement_pool,
                      ids.dtype.type(rule.mask_id), select_thr, mask_thr, random_thr, out_ids, out_labels, counts)
    return out_ids, out_labels, counts
