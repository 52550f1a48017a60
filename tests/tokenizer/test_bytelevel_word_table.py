"""The byte-level kernel's word table (`word_table`): an entry gives back the ids it was given, a
seeded word is never pushed out, the seeds are placed in id order, a crowded table grows, and the
overflow bitmap marks every set whose words may be in the second cache only (a miss in a set not
marked skips that cache, so a mark left out would make a cached word be merged again, and a wrong
table entry would give wrong ids: each is checked against the real tokenizer's ids)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.kernels.tokenizer.bytelevel.encode import ByteLevelCache
from pipeline.kernels.tokenizer.bytelevel.word_cache import RECORD_IDS
from pipeline.kernels.tokenizer.bytelevel.word_table import (
    FRONT_BYTES,
    KEPT,
    NOT_FOR_TABLE,
    NOT_KEPT,
    PUSHED,
    empty_table,
    front_ids,
    front_keep,
    front_key,
    front_set,
    front_shift,
    overflowed,
    seed_words,
    seeded_table,
)
from pipeline.tokenizer.fast import FastTokenizer
from tests.tokenizer.test_bytelevel import _word_lengths_text, pair, tokenizer_json


def _key(word: bytes) -> tuple[np.uint64, np.uint64]:
    packed = int.from_bytes(word, "little")
    return np.uint64(packed & (2 ** 64 - 1)), np.uint64(front_key(np.uint64(packed >> 64), len(word)))


def _set(table: np.ndarray, k0: np.uint64, k1: np.uint64) -> int:
    """The word's set (uint64 all through: numba makes a float of an int64 times a uint64)."""
    return front_set(np.uint64(k0), np.uint64(k1), np.uint64(front_shift(table)))


def _find(table: np.ndarray, word: bytes) -> list[int] | None:
    k0, k1 = _key(word)
    out = np.full(8, -7, dtype=np.int32)
    done = front_ids(table, _set(table, k0, k1), k0, k1, out, 0)
    return None if done < 0 else out[:done].tolist()


def _keep(table: np.ndarray, word: bytes, ids: list[int]) -> int:
    k0, k1 = _key(word)
    return front_keep(table, _set(table, k0, k1), k0, k1, np.array(ids, dtype=np.int32), 0,
                      len(ids))


def test_an_entry_gives_back_the_ids_it_was_given_and_a_seeded_word_stays():
    """One set of two ways (a table of 2 sets, words put in their own set): 1 to 4 ids come back,
    keys that differ only in length or in a zero byte are different words, a fifth id or an id past
    ID_LIMIT is not for the table, and once both ways are seeded a new word finds no room."""
    table = empty_table(2)
    words = {b"\x00": [5], b"a": [1, 2], b"a\x00": [3, 4, 5], b"abcdefghijklmno": [7, 8, 9, 10]}
    for word, ids in words.items():
        table[:] = 0
        assert _keep(table, word, ids) == KEPT and _find(table, word) == ids
        for other in words:
            if other != word:
                assert _find(table, other) is None
    table[:] = 0
    assert _keep(table, b"abc", [1, 2, 3, 4, 5]) == NOT_FOR_TABLE and _keep(table, b"abc", [1 << 28]) == NOT_FOR_TABLE
    assert _find(table, b"abc") is None
    same_set = [w for w in (bytes([b]) for b in range(256)) if _set(table, *_key(w)) == _set(table, *_key(b"x"))]
    first, second, third = same_set[:3]
    assert _keep(table, first, [1]) == KEPT and _keep(table, second, [2]) == KEPT
    assert _keep(table, third, [3, 3]) == PUSHED and _find(table, third) == [3, 3]  # a word from texts gives way
    seeds = seed_words(*(np.array(v, dtype=t) for v, t in (([first[0], second[0], third[0]], np.uint64),
                                                          ([0, 0, 0], np.uint64), ([1, 1, 1], np.int64),
                                                          ([11, 12, 13], np.int64))))
    seeded = seeded_table(seeds, 2)
    assert _find(seeded, first) == [11] and _find(seeded, second) == [12] and _find(seeded, third) is None
    assert _keep(seeded, third, [13]) == NOT_KEPT and _find(seeded, first) == [11]  # seeded: never pushed out


@pytest.mark.parametrize("name", ["roberta", "llama3", "gpt2_affixes"])
def test_the_seeds_are_placed_in_id_order_and_a_seed_left_out_met_two_earlier_ones(name):
    """Every seed is in the tokenizer's table, unless both ways of its set hold seeds of lower ids
    (the frequent words, which BPE learns first, get their set first); in a table of 16 sets most
    are left out, the same way."""
    tables = pair(name)[1]._impl.tables
    for table in (tables.front, seeded_table(tables.seeds, 16)):
        left_out = 0
        for k0, k1, token in tables.seeds:
            found = _find_key(table, k0, k1)
            if found == [int(token)]:
                continue
            assert found is None
            left_out += 1
            row = _set(table, k0, k1)
            ways = [table[row, w:w + 4] for w in (0, 4)]
            assert all(way[2] >> np.uint64(31) & np.uint64(1) and int(way[2] & np.uint64((1 << 28) - 1)) <= token
                       for way in ways)
        assert (left_out > len(tables.seeds) - 40) == (table.shape[0] == 16)


def _find_key(table: np.ndarray, k0: np.uint64, k1: np.uint64) -> list[int] | None:
    out = np.zeros(8, dtype=np.int32)
    done = front_ids(table, _set(table, k0, k1), k0, k1, out, 0)
    return None if done < 0 else out[:done].tolist()


def _assert_marks_cover_the_second_cache(cache: ByteLevelCache) -> int:
    """Every word of up to FRONT_BYTES bytes the second cache holds and the table lacks has its set
    marked; returns how many such words there are."""
    records, table = cache.records, cache.front
    only_there, row = 0, 0
    while row < records.shape[0]:
        meta = int(records[row, 3])
        n, count = meta & 0xFF, meta >> 8 & 0xFF
        if 1 <= n <= FRONT_BYTES:
            k0, k1 = records[row, 0], np.uint64(front_key(records[row, 1], n))
            if _find_key(table, k0, k1) is None:
                only_there += 1
                assert overflowed(cache.flags, _set(table, k0, k1)), (row, n, count)
        row += 2 if count > RECORD_IDS and row % 2 == 0 else 1
    return only_there


@pytest.mark.parametrize("name", ["roberta", "llama3"])
def test_a_crowded_table_grows_to_what_the_texts_bring_and_every_word_keeps_its_ids(name):
    """A table of 2 sets that grows: hundreds of words of every length and 1 to many ids crowd it,
    it doubles (the words it held and the second cache's move in, the others' sets marked), and
    every pass gives the real ids; the overflow marks cover the second cache before and after."""
    real, _ = pair(name)
    fast = FastTokenizer(real, tokenizer_json(name))
    cache = ByteLevelCache(fast._impl.tables, sets=64, front_sets=2, grows=True)
    fast._impl.cache = cache
    texts = [_word_lengths_text(seed) for seed in range(3)]
    for text in texts + texts:
        np.testing.assert_array_equal(fast.encode(text), real.encode(text, add_special_tokens=False).ids)
        _assert_marks_cover_the_second_cache(cache)
    assert cache.front.shape[0] >= 64
    fixed = ByteLevelCache(fast._impl.tables, sets=64, front_sets=16)  # never grows: many words only in records
    fast._impl.cache = fixed
    for text in texts:
        np.testing.assert_array_equal(fast.encode(text), real.encode(text, add_special_tokens=False).ids)
    assert fixed.front.shape[0] == 16 and _assert_marks_cover_the_second_cache(fixed) > 20
