"""What the tests of streamed near-duplicate pairs measure: the pairs of one first input counted as
they come, under tracemalloc."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterable


def count_first_pairs(pairs: Iterable[tuple], first: str, every: int) -> tuple[int, set, int]:
    """(pairs counted, the later input of every `every`-th, peak traced bytes) of `pairs`, each
    asserted to pair `first`; tracing starts before the first pair is asked for."""
    tracemalloc.start()
    try:
        count, later = 0, set()
        for a, b, _, _ in pairs:
            assert a == first
            count += 1
            if count % every == 0:
                later.add(b)
        return count, later, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
