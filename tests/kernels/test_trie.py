"""The double-array trie's builder (linear in the vocabulary: a free-cell list, and a cell that fails
as a first child MAX_TRIES times leaves it) gives exactly the lookups of a dict, on vocabularies large
and dense enough to grow the arrays and skip cells: every key, every prefix of a key, random probes."""

from __future__ import annotations

import random

import pytest

from pipeline.kernels.tokenizer.sentencepiece.trie import MAX_TRIES, DoubleArray


def _vocabulary(seed: int, size: int) -> dict[bytes, int]:
    rng = random.Random(seed)
    alphabet = [bytes([b]) for b in b"abcdefghij"] + ["\u00e9\u00f1\u00df\u6f22\u2581".encode()[i: i + 1]
                                                       for i in range(11)]
    out: dict[bytes, int] = {bytes([b]): b for b in range(256)}  # a node with all 256 children
    out.update({b"x" + bytes([b]): 300 + b for b in range(0, 256, 3)})
    while len(out) < size:
        key = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        out.setdefault(key, rng.randrange(1 << 20))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lookups_are_a_dicts(seed):
    entries = _vocabulary(seed, 20_000)
    trie = DoubleArray.build(entries)
    for key, value in entries.items():
        assert trie.lookup(key) == value
        for k in range(1, len(key)):
            assert trie.lookup(key[:k]) == entries.get(key[:k], -1)
        assert trie.lookup(key + b"\xff") == entries.get(key + b"\xff", -1)
    rng = random.Random(seed)
    for _ in range(5000):
        probe = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        assert trie.lookup(probe) == entries.get(probe, -1)
    # compact as first-fit: the cells hold little more than the keys' bytes
    assert trie.cells.shape[0] <= sum(map(len, entries)) + 512 + MAX_TRIES * 256


def test_the_empty_vocabulary_and_one_key():
    assert DoubleArray.build({}).lookup(b"a") == -1
    trie = DoubleArray.build({b"\x00\xff": 7})
    assert trie.lookup(b"\x00\xff") == 7 and trie.lookup(b"\x00") == -1
