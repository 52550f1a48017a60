"""The kernels' open-addressing hash tables: byte strings to ids (`ByteTable`: the vocabularies of
the tokenizer kernels) and int64 keys to int64 values (`int_table`: merges, character pairs).

Both are at most half full, their size a power of two; the low bits of the key's hash pick the
first slot and collisions probe linearly. `ByteTable` keys are hashed with FNV-1a (`hash_step` from
FNV_OFFSET) and a hit is confirmed byte for byte, so the table is exact for any keys; the kernels
hash a word as they scan it (one `hash_step` a byte) and look it up with the hash they already
hold (`lookup`), so no byte is read twice to hash it (`find` hashes and looks up). An `int_table`
holds each key beside its value in one row, so a lookup touches one place in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hashing import FNV_OFFSET, FNV_PRIME
from pipeline.kernels.common.jit import kernel

__all__ = ["FNV_OFFSET", "NO_VALUE", "ByteTable", "find", "hash_bytes", "hash_step", "int_get", "int_table", "lookup",
           "table_size"]

NO_VALUE = -1  # an empty int_table row's key, and what int_get returns for a key not in the table
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(29)


def table_size(entries: int) -> int:
    """Slots of a table of `entries` keys: the power of two that keeps it at most half full (>= 16)."""
    return 1 << max(4, int(2 * max(entries, 1) - 1).bit_length())


@kernel()
def hash_step(h, byte):
    """FNV-1a: the hash h extended by one byte."""
    return (h ^ np.uint64(byte)) * FNV_PRIME


@kernel(inline="always")
def hash_bytes(data, start, stop):
    """FNV-1a of data[start:stop] (uint8 array)."""
    h = FNV_OFFSET
    for k in range(start, stop):
        h = hash_step(h, data[k])
    return h


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
def find(word, start, stop, blob, starts, lengths, ids, slots):
    """The id of word[start:stop] in a ByteTable's arrays, or -1 (`lookup` after hashing it)."""
    return lookup(hash_bytes(word, start, stop), word, start, stop, blob, starts, lengths, ids, slots)


@kernel()
def _fill_slots(blob, starts, lengths, slots):
    mask = slots.shape[0] - 1
    for i in range(starts.shape[0]):
        h = hash_bytes(blob, starts[i], starts[i] + lengths[i])
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
        slots = np.zeros(table_size(len(keys)), dtype=np.int32)
        _fill_slots(blob, starts, lengths, slots)
        return cls(blob=blob, starts=starts, lengths=lengths, ids=ids, slots=slots)

    @classmethod
    def of_arrays(cls, blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> ByteTable:
        """The table of keys blob[starts[i]:starts[i] + lengths[i]] -> ids[i] (distinct keys; `blob`
        uint8, may hold bytes no key covers), in the order given: a vocabulary's keys without a
        Python object a key. Raises ValueError where the arrays disagree in length."""
        if not starts.shape[0] == lengths.shape[0] == ids.shape[0]:
            raise ValueError(f"starts, lengths and ids must have one length, got {starts.shape[0]}, "
                             f"{lengths.shape[0]} and {ids.shape[0]}")
        blob = np.ascontiguousarray(blob, dtype=np.uint8) if blob.shape[0] else np.zeros(1, np.uint8)
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        slots = np.zeros(table_size(starts.shape[0]), dtype=np.int32)
        _fill_slots(blob, starts, lengths, slots)
        return cls(blob=blob, starts=starts, lengths=lengths, ids=np.ascontiguousarray(ids, dtype=np.int32),
                   slots=slots)

    def get(self, key: bytes) -> int:
        """The id of `key`, or -1 (for tests and table building; kernels call `lookup`)."""
        return int(find(np.frombuffer(key, dtype=np.uint8), 0, len(key), self.blob, self.starts, self.lengths,
                        self.ids, self.slots))


@kernel(inline="always")
def _int_slot(key, mask):
    """The first slot of an int64 key: a multiplicative hash's low bits."""
    z = np.uint64(key) * _GOLDEN
    return np.int64((z ^ (z >> _SHIFT)) & np.uint64(mask))


@kernel()
def int_get(key, table):
    """The value of `key` (>= 0) in an `int_table`, or NO_VALUE."""
    mask = table.shape[0] - 1
    slot = _int_slot(key, mask)
    while True:
        found = table[slot, 0]
        if found == key:
            return table[slot, 1]
        if found == NO_VALUE:
            return np.int64(NO_VALUE)
        slot = (slot + 1) & mask


@kernel()
def _fill_int_table(keys, values, table):
    mask = table.shape[0] - 1
    for i in range(keys.shape[0]):
        if keys[i] < 0:
            continue
        slot = _int_slot(keys[i], mask)
        while table[slot, 0] != NO_VALUE:
            slot = (slot + 1) & mask
        table[slot, 0] = keys[i]
        table[slot, 1] = values[i]


def int_table(keys: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
    """An open-addressing table from int64 keys (distinct, >= 0; negative ones are left out) to int64
    values (>= 0; all 0 when None: a set): int64, shape (table_size(len(keys)), 2), each row (key or
    NO_VALUE, value). Look keys up with `int_get`."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    values = np.zeros(keys.shape[0], np.int64) if values is None else np.ascontiguousarray(values, dtype=np.int64)
    if values.shape != keys.shape:
        raise ValueError(f"int_table: {keys.shape[0]} keys but {values.shape[0]} values")
    table = np.full((table_size(keys.shape[0]), 2), NO_VALUE, dtype=np.int64)
    _fill_int_table(keys, values, table)
    return table
