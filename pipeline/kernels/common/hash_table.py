"""An open-addressing hash table from byte strings to ids: the vocabularies of the tokenizer kernels.

Keys are hashed with FNV-1a (`hash_step` from FNV_OFFSET), the low bits of the hash pick the first
slot, collisions probe linearly, and a hit is confirmed byte for byte, so the table is exact for any
keys. The kernels hash a word as they scan it (one `hash_step` a byte) and look it up with the hash
they already hold (`lookup`), so no byte is read twice to hash it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hashing import FNV_OFFSET, FNV_PRIME
from pipeline.kernels.common.jit import kernel

__all__ = ["FNV_OFFSET", "ByteTable", "hash_step", "lookup"]


@kernel()
def hash_step(h, byte):
    """FNV-1a: the hash h extended by one byte."""
    return (h ^ np.uint64(byte)) * FNV_PRIME


@kernel()
def lookup(h, word, start, stop, blob, starts, lengths, ids, slots):
    """The id of word[start:stop] (uint8 array) whose FNV-1a hash is h in a ByteTable's arrays, or -1."""
    mask = slots.shape[0] - 1
    slot = np.int64(h & np.uint64(mask))
    n = stop - start
    while slots[slot] != 0:
        entry = slots[slot] - 1
        if lengths[entry] == n:
            base = starts[entry]
            same = True
            for k in range(n):
                if blob[base + k] != word[start + k]:
                    same = False
                    break
            if same:
                return ids[entry]
        slot = (slot + 1) & mask
    return -1


@kernel()
def _fill_slots(blob, starts, lengths, slots):
    mask = slots.shape[0] - 1
    for i in range(starts.shape[0]):
        h = FNV_OFFSET
        for k in range(starts[i], starts[i] + lengths[i]):
            h = hash_step(h, blob[k])
        slot = np.int64(h & np.uint64(mask))
        while slots[slot] != 0:
            slot = (slot + 1) & mask
        slots[slot] = i + 1


@dataclass(frozen=True)
class ByteTable:
    """An open-addressing hash table from byte strings to ids (at most half full).

    Attributes:
        blob: uint8, every key's bytes one after another.
        starts, lengths: int64, shape (n,): where key i lies in `blob`.
        ids: int32, shape (n,): the id of key i.
        slots: int32, shape (power of two,): key index + 1 of each slot, 0 when empty.
    """

    blob: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    slots: np.ndarray

    @classmethod
    def build(cls, entries: dict[bytes, int]) -> ByteTable:
        """The table of `entries` (keys in sorted order, so the same entries give the same arrays)."""
        keys = sorted(entries)
        lengths = np.array([len(k) for k in keys], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if keys else np.zeros(0, np.int64)
        blob = np.frombuffer(b"".join(keys), dtype=np.uint8).copy() if keys else np.zeros(1, np.uint8)
        ids = np.array([entries[k] for k in keys], dtype=np.int32)
        size = 1 << max(4, int(2 * max(len(keys), 1) - 1).bit_length())
        slots = np.zeros(size, dtype=np.int32)
        _fill_slots(blob, starts, lengths, slots)
        return cls(blob=blob, starts=starts, lengths=lengths, ids=ids, slots=slots)

    def get(self, key: bytes) -> int:
        """The id of `key`, or -1 (for tests and table building; kernels call `lookup`)."""
        h = int(FNV_OFFSET)
        for byte in key:
            h = ((h ^ byte) * int(FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
        return int(lookup(np.uint64(h), np.frombuffer(key, dtype=np.uint8), 0, len(key), self.blob, self.starts,
                          self.lengths, self.ids, self.slots))
