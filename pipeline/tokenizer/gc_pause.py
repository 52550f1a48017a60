"""Python's cyclic garbage collector paused while a tokenizer's load makes millions of objects.

A 250,000-piece vocabulary parsed (`json.loads`: 250,000 lists) or turned into kernel tables makes
objects in bursts that set off the collector again and again, and each full collection walks every
object alive, the tokenizer's other parses among them: the collector took ~0.27 of the 0.36 CPU-s of
one 256k Unigram parse measured (0.09 s paused). Nothing a load makes is a reference cycle that
must go at once; the collector resumes where it was enabled at entry.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collection off inside the block; back on after it when it was on before (nesting keeps it off
    until the outermost block ends)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
