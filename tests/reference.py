"""Slow, obviously-correct references the kernels are tested against."""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(x: int) -> int:
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mask_row_reference(ids, seed, epoch, is_special, pool, mask_id, p_select, p_mask, p_random):
    """Pure-Python mask of one row with the same counter-based draws as the kernel: position j's
    selection draw is 16-bit lane j % 4 of splitmix64(stream + j // 4); its category and random
    token come from splitmix64((stream ^ CATEGORY) + j), top and low 32 bits."""
    epoch_salt, category_salt, force_salt = 0xE90C4E90C4E90C4E, 0xCA7E6021CA7E6021, 0xF02CEF02CEF02CE1
    stream = splitmix64(int(seed) ^ splitmix64(epoch ^ epoch_salt))
    out = [int(t) for t in ids]
    labels = [-100] * len(ids)
    eligible = [j for j, t in enumerate(ids) if not is_special[t]]

    def draw(j):
        return (splitmix64((stream + j // 4) & MASK64) >> (16 * (j % 4))) & 0xFFFF

    def apply(j):
        labels[j] = int(ids[j])
        h = splitmix64(((stream ^ category_salt) + j) & MASK64)
        u = h >> 32
        if u < round(p_mask * 2**32):
            out[j] = mask_id
        elif u < round(min(1.0, p_mask + p_random) * 2**32):
            out[j] = int(pool[((h & 0xFFFFFFFF) * len(pool)) >> 32])

    selected = [j for j in eligible if draw(j) < round(p_select * 2**16)]
    for j in selected:
        apply(j)
    if not selected and eligible:
        apply(eligible[splitmix64(stream ^ force_salt) % len(eligible)])
    return np.array(out), np.array(labels)
