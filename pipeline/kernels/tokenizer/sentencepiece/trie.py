"""A double-array trie of byte strings: one array read per byte walked, no hashing.

The Unigram Viterbi asks, at every position of a word, which vocabulary pieces start there and end
where; `tokenizers` answers with a trie walk (`Trie::common_prefix_search`). Hashing every prefix
into a table answers the same question but costs a hash, a probe and a byte compare per prefix; a
double array walks the same bytes with one read each: the child of `node` by byte `c` is
`t = base[node] + c` when `check[t] == node`, and `value[t]` is the id of the string spelt so far
(-1 where it is only a prefix of longer strings).

`DoubleArray.build` places every node's children at the first base where all their cells are
free (the classic first-fit construction, darts-style), in a jitted loop over the sorted keys that
walks a list of the free cells and drops a cell from it after MAX_TRIES failed tries, so the build is
linear in the vocabulary: 16k / 64k / 250k random pieces of 1-12 characters in 0.03 / 0.13 / 0.6-0.9 s
of CPU (`python -m benchmarks.trie_build`, session 15 at load 12-16; a scan of every cell from the first
free one took 0.65 s at 16k, 13 s at 64k). A whole 256k Unigram model's tables (`unigram.UnigramTables`,
with the sort and key arrays) build in about 0.6 s of a worker's load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.jit import helper, kernel

ROOT = 0
_FREE = -1
_UNLISTED = -2  # prev_free of a cell that is not in the free list
MAX_TRIES = 16  # failed tries of a free cell as a node's first child before the search skips it


@dataclass(frozen=True)
class DoubleArray:
    """A trie from byte strings to ids.

    Attributes:
        base, check: int32, shape (cells,): the child of node n by byte c is t = base[n] + c when
            t < cells and check[t] == n (the root is node 0; check is -1 at free cells).
        value: int32, shape (cells,): the id of the string that leads to each node, -1 where none.
        cells: int32, shape (cells, 4): base, check and value side by side (and a zero), what the
            kernels walk: one step reads one 16-byte cell.
    """

    base: np.ndarray
    check: np.ndarray
    value: np.ndarray
    cells: np.ndarray

    @classmethod
    def build(cls, entries: dict[bytes, int]) -> DoubleArray:
        """`entries`: byte string -> id (>= 0); the empty string is not stored."""
        keys = sorted(entries)
        if keys and not keys[0]:
            keys = keys[1:]  # sorted: the empty string, if any, comes first
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        starts = np.zeros(len(keys), dtype=np.int64)
        if keys:
            starts[1:] = np.cumsum(lengths)[:-1]
        blob = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8).copy()
        ids = np.fromiter(map(entries.__getitem__, keys), dtype=np.int64, count=len(keys))
        if np.any(ids < 0) or np.any(ids > np.iinfo(np.int32).max):
            raise ValueError("DoubleArray ids must be in [0, 2**31 - 1]")
        base, check, value, used = _build(blob, starts, lengths, ids.astype(np.int32),
                                          256 + int(lengths.sum()) // 2)  # grows by doubling where short
        cells = np.zeros((used + 256, 4), dtype=np.int32)  # 256 spare: base + byte never runs off the end
        cells[:, 1] = _FREE
        cells[:used, 0], cells[:used, 1], cells[:used, 2] = base[:used], check[:used], value[:used]
        cells[used:, 2] = -1
        return cls(base=base[:used].copy(), check=check[:used].copy(), value=value[:used].copy(), cells=cells)

    def lookup(self, key: bytes) -> int:
        """The id of `key`, or -1 (for tests and tools; kernels call `find_id`)."""
        data = np.frombuffer(key, dtype=np.uint8)
        return int(find_id(data, 0, len(data), self.cells)) if key else -1


@helper
def _grown(size, kept, base_, check_, value_, next_, prev_, tries_):
    """The build's arrays at `size` cells: the first `kept` copied, the rest free (plain loops: numpy's
    fill and slice assignment cost seconds of compile time here). The new cells are not yet linked."""
    base = np.empty(size, np.int32)
    check = np.empty(size, np.int32)
    value = np.empty(size, np.int32)
    next_free = np.empty(size, np.int64)
    prev_free = np.empty(size, np.int64)
    tries = np.empty(size, np.int32)
    for t in range(size):
        if t < kept:
            base[t], check[t], value[t] = base_[t], check_[t], value_[t]
            next_free[t], prev_free[t], tries[t] = next_[t], prev_[t], tries_[t]
        else:
            base[t], check[t], value[t] = 0, _FREE, -1
            next_free[t], prev_free[t], tries[t] = -1, -1, 0
    return base, check, value, next_free, prev_free, tries


@helper
def _unlink(cell, next_free, prev_free, head, tail):
    """Take `cell` out of the doubly linked free list; the list's new (head, tail)."""
    before, after = prev_free[cell], next_free[cell]
    if before >= 0:
        next_free[before] = after
    else:
        head = after
    if after >= 0:
        prev_free[after] = before
    else:
        tail = before
    prev_free[cell] = _UNLISTED
    return head, tail


@kernel()
def _build(blob, starts, lengths, ids, capacity):
    """First-fit double-array construction over sorted keys; returns (base, check, value, cells used).

    The free cells form a doubly linked list (`next_free`, `prev_free`, head first), which the search
    for a node's base walks instead of every cell; a free cell that has failed as the first child's
    place MAX_TRIES times leaves the list (it stays free, and may still take a later child), so the
    whole build does at most MAX_TRIES failed tries per cell: linear in the vocabulary."""
    cells = max(capacity, 512)
    empty32 = np.zeros(1, np.int32)
    empty64 = np.zeros(1, np.int64)
    base, check, value, next_free, prev_free, tries = _grown(cells, 0, empty32, empty32, empty32, empty64,
                                                             empty64, empty32)
    check[ROOT] = -2  # the root's cell is taken
    for t in range(1, cells):  # the free list: 1, 2, ..., cells - 1
        prev_free[t] = t - 1 if t > 1 else -1
        next_free[t] = t + 1 if t + 1 < cells else -1
    head = 1
    tail = cells - 1
    n = lengths.shape[0]
    # work stack of (node, first key, end key, depth): keys [lo, hi) share their first `depth` bytes
    stack = np.empty((max(n, 1) * 2 + 16, 4), np.int64)
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = ROOT, 0, n, 0
    top = 1
    children = np.empty(256, np.int64)
    bounds = np.empty(257, np.int64)
    used = 1
    while top > 0:
        top -= 1
        node, lo, hi, depth = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
        k = lo
        if k < hi and lengths[k] == depth:  # sorted: the key that ends here comes first
            value[node] = ids[k]
            k += 1
        count = 0
        while k < hi:
            c = blob[starts[k] + depth]
            children[count] = c
            bounds[count] = k
            count += 1
            while k < hi and blob[starts[k] + depth] == c:
                k += 1
        bounds[count] = hi
        if count == 0:
            continue
        position = head
        while True:
            if position < 0 or position + 256 >= cells:  # grow: the new cells join the list's end
                grown = cells * 2
                base, check, value, next_free, prev_free, tries = _grown(grown, cells, base, check, value,
                                                                         next_free, prev_free, tries)
                for t in range(cells, grown):
                    prev_free[t] = tail if t == cells else t - 1
                    next_free[t] = t + 1 if t + 1 < grown else -1
                if tail >= 0:
                    next_free[tail] = cells
                else:
                    head = cells
                if position < 0:
                    position = cells
                tail = grown - 1
                cells = grown
            b = position - children[0]
            fits = b >= 1
            if fits:
                for i in range(1, count):
                    if check[b + children[i]] != _FREE:
                        fits = False
                        break
            if fits:
                break
            following = next_free[position]
            tries[position] += 1
            if tries[position] >= MAX_TRIES:  # leaves the list
                head, tail = _unlink(position, next_free, prev_free, head, tail)
            position = following
        base[node] = b
        for i in range(count):
            t = b + children[i]
            check[t] = node
            used = max(used, t + 1)
            if prev_free[t] != _UNLISTED:  # still in the list: take it out
                head, tail = _unlink(t, next_free, prev_free, head, tail)
        if top + count > stack.shape[0]:
            stack2 = np.empty((stack.shape[0] * 2 + count, 4), np.int64)
            for r in range(top):
                for c in range(4):
                    stack2[r, c] = stack[r, c]
            stack = stack2
        for i in range(count):
            stack[top, 0] = b + children[i]
            stack[top, 1] = bounds[i]
            stack[top, 2] = bounds[i + 1]
            stack[top, 3] = depth + 1
            top += 1
    return base, check, value, used


@kernel()
def find_id(word, start, stop, cells):
    """The id of word[start:stop] (non-empty), or -1; cells: `DoubleArray.cells`."""
    node = ROOT
    for e in range(start, stop):
        t = cells[node, 0] + word[e]
        if cells[t, 1] != node:
            return -1
        node = t
    return cells[node, 2]
