"""One place for numba options, so every kernel is cached on disk and compiled the same way."""

from __future__ import annotations

from typing import Any, Callable

import numba

JIT_OPTIONS = {"cache": True, "nogil": True}


def kernel(*signatures: Any) -> Callable:
    """`@kernel()` or `@kernel(sig, ...)`: numba.njit with the project's options."""
    if signatures:
        return numba.njit(list(signatures), **JIT_OPTIONS)
    return numba.njit(**JIT_OPTIONS)
