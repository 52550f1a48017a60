"""One place for numba options, so every kernel is cached on disk and compiled the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

JIT_OPTIONS = {"cache": True, "nogil": True}


def kernel(*signatures: Any, **extra: Any) -> Callable:
    """`@kernel()` or `@kernel(sig, ...)`: numba.njit with the project's options (plus `extra`)."""
    if signatures:
        return numba.njit(list(signatures), **JIT_OPTIONS, **extra)
    return numba.njit(**JIT_OPTIONS, **extra)
