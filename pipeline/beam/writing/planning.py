"""Deterministic planning of parallel work: balancing inputs over workers, and cutting a split's
rows into shards. Pure Python: the same plan for any runner, worker count or input order."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TypeVar

from schemas.manifest import TARGET_SHARD_BYTES

T = TypeVar("T")


def balanced_bins(items: list[T], n_bins: int, *, size: Callable[[T], int], key: Callable[[T], str]) -> list[list[T]]:
    """Longest-processing-time-first: the largest item goes to the least loaded bin. Input order
    does not matter (ties are broken by `key`), so neither does it for the bins; empty bins are
    dropped."""
    bins: list[list[T]] = [[] for _ in range(n_bins)]
    loads = [0] * n_bins
    for item in sorted(items, key=lambda it: (-size(it), key(it))):
        target = loads.index(min(loads))
        bins[target].append(item)
        loads[target] += max(size(item), 1)
    return [b for b in bins if b]


def shard_count(total_rows: int, bytes_per_row: int, requested: int | None) -> int:
    """`--num_shards`, else about TARGET_SHARD_BYTES a shard; never more shards than rows, never 0."""
    wanted = requested if requested is not None else math.ceil(total_rows * bytes_per_row / TARGET_SHARD_BYTES)
    return max(1, min(wanted, total_rows))


def range_pieces(begin: int, end: int, per_copy: int) -> Iterator[tuple[int, int, int]]:
    """Split a global row range into (copy, begin, end) pieces within one copy each."""
    while begin < end:
        copy, local = divmod(begin, per_copy)
        stop = min(end, (copy + 1) * per_copy)
        yield copy, local, local + (stop - begin)
        begin = stop
