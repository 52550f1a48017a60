"""The kernels' hash tables (`ByteTable`, `int_table`) against a dict, with colliding keys."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.common.hash_table import (
    NO_VALUE,
    ByteTable,
    find,
    hash_bytes,
    int_get,
    int_table,
    lookup,
    table_size,
)

MASK64 = (1 << 64) - 1


def fnv1a(key: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in key:
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def int_home(key: int, slots: int) -> int:
    """The first slot `int_table` tries for `key` (its hash, written out in Python)."""
    z = (key * 0x9E3779B97F4A7C15) & MASK64
    return (z ^ (z >> 29)) & (slots - 1)


def colliding(home, count: int, candidates) -> list:
    """`count` candidates, most of which share one first slot (so lookups walk a probe chain)."""
    by_home: dict[int, list] = {}
    for key in candidates:
        by_home.setdefault(home(key), []).append(key)
    crowd = max(by_home.values(), key=len)[:count // 2 + 1]
    rest = [key for key in candidates if key not in crowd][:count - len(crowd)]
    return crowd + rest


def test_hash_bytes_is_fnv1a():
    for key in (b"", b"a", b"hello", bytes(range(256))):
        data = np.frombuffer(b"xx" + key + b"yy", dtype=np.uint8)
        assert int(hash_bytes(data, 2, 2 + len(key))) == fnv1a(key)


def test_a_byte_table_with_colliding_keys_finds_each_and_nothing_else():
    n = 40
    slots = table_size(n)
    keys = colliding(lambda k: fnv1a(k) & (slots - 1), n, [f"k{i}".encode() for i in range(2000)])
    entries = {key: 100 + i for i, key in enumerate(keys)}
    table = ByteTable.build(entries)
    assert table.slots.shape[0] == slots
    homes = Counter(fnv1a(k) & (slots - 1) for k in keys)
    assert max(homes.values()) >= n // 4  # a long chain the lookups walk (uniform keys: about 1 a slot)
    for key, value in entries.items():
        assert table.get(key) == value
    crowd_home = homes.most_common(1)[0][0]
    absent = [f"k{i}".encode() for i in range(2000, 40000) if fnv1a(f"k{i}".encode()) & (slots - 1) == crowd_home]
    for key in absent[:20] + [b"", b"k", b"k0\0"]:
        assert key in entries or table.get(key) == -1


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.binary(max_size=6), st.integers(0, 2**31 - 1), max_size=40), st.binary(max_size=6))
def test_a_byte_table_answers_as_a_dict(entries, other):
    table = ByteTable.build(entries)
    for key, value in entries.items():
        assert table.get(key) == value
        word = np.frombuffer(b"<" + key + b">", dtype=np.uint8)  # a key inside a longer word
        assert find(word, 1, 1 + len(key), table.blob, table.starts, table.lengths, table.ids, table.slots) == value
        assert lookup(np.uint64(fnv1a(key)), word, 1, 1 + len(key), table.blob, table.starts, table.lengths,
                      table.ids, table.slots) == value
    assert table.get(other) == entries.get(other, -1)


def test_an_int_table_with_colliding_keys_finds_each_and_nothing_else():
    n = 50
    slots = table_size(n)
    keys = colliding(lambda k: int_home(k, slots), n, list(range(0, 1 << 40, (1 << 40) // 5000)))
    values = [3 * i for i in range(n)]
    table = int_table(np.array(keys), np.array(values))
    assert table.shape == (slots, 2)
    assert max(Counter(int_home(k, slots) for k in keys).values()) >= n // 4
    for key, value in zip(keys, values):
        assert int_get(key, table) == value
    for key in (1, 2, (1 << 40) + 7, (1 << 62) + 1, *(k + 1 for k in keys), *(k - 1 for k in keys if k)):
        assert int_get(key, table) == NO_VALUE  # neighbours of every key too: a hit is the key itself


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 2**62), st.integers(0, 2**62), max_size=60), st.integers(0, 2**62))
def test_an_int_table_answers_as_a_dict(entries, other):
    table = int_table(np.array(list(entries), dtype=np.int64), np.array(list(entries.values()), dtype=np.int64))
    for key, value in entries.items():
        assert int_get(key, table) == value
    assert int_get(other, table) == entries.get(other, NO_VALUE)


def test_an_int_table_as_a_set_and_its_bad_input():
    table = int_table(np.array([5, -1, 7]))  # a negative key is left out (the empty placeholder)
    assert [int(int_get(k, table)) for k in (5, 7, 6)] == [0, 0, NO_VALUE]
    assert int_get(3, int_table(np.zeros(0, np.int64))) == NO_VALUE
    with pytest.raises(ValueError, match="3 keys but 2 values"):
        int_table(np.array([1, 2, 3]), np.array([1, 2]))
