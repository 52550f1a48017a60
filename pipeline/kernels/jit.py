"""One place for numba options, so every kernel is cached on disk and compiled the same way.

numba's on-disk cache checks only the source file that defines a kernel (its mtime and size). A
kernel calling a jitted helper of another module keeps its compiled code when only the helper's
module changes: after a `git pull` that edits `hash_table.py` alone, `wordpiece.py`'s cached kernel
would still run the old lookup and give other ids. So the first import of this module compares a
digest of every kernel module's source with the one the cache was built from, and drops the
package's cached kernels when they differ (`drop_stale_kernel_caches`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba

JIT_OPTIONS = {"cache": True, "nogil": True}
_STAMP = "maskbeam-kernels.sha256"
_CACHE_SUFFIXES = (".nbi", ".nbc")


def kernels_digest(folder: Path) -> str:
    """sha256 over the names and sources of the kernel modules in `folder`."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def drop_stale_kernel_caches(folder: Path) -> int:
    """Remove numba's cache files in `folder`/__pycache__ unless they were built from the sources
    there now; returns how many were removed. Safe when several processes start at once: a file
    another process is loading is simply compiled again; an unwritable cache folder is left alone."""
    cache = folder / "__pycache__"
    stamp = cache / _STAMP
    current = kernels_digest(folder)
    try:
        if stamp.read_text() == current:
            return 0
    except OSError:
        pass
    removed = 0
    try:
        cache.mkdir(exist_ok=True)
        for path in cache.iterdir():
            if path.suffix in _CACHE_SUFFIXES:
                try:
                    path.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
        temp = cache / f"{_STAMP}.{os.getpid()}"
        temp.write_text(current)
        temp.replace(stamp)
    except OSError:  # a read-only install: numba caches elsewhere (NUMBA_CACHE_DIR or the user's cache)
        pass
    return removed


drop_stale_kernel_caches(Path(__file__).resolve().parent)


def kernel(*signatures: Any, **extra: Any) -> Callable:
    """`@kernel()` or `@kernel(sig, ...)`: numba.njit with the project's options (plus `extra`)."""
    if signatures:
        return numba.njit(list(signatures), **JIT_OPTIONS, **extra)
    return numba.njit(**JIT_OPTIONS, **extra)
