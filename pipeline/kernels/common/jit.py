"""One place for numba options, so every kernel is cached on disk and compiled the same way.

numba's on-disk cache checks only the source file that defines a kernel (its mtime and size). A
kernel calling a jitted helper of another module keeps its compiled code when only the helper's
module changes: after a `git pull` that edits `common/hash_table.py` alone,
`tokenizer/wordpiece/encode.py`'s cached kernel would still run the old lookup and give other ids.
So the first import of this module compares a digest of every kernel module's source (all of
`pipeline/kernels`) with the one the cache was built from, and drops every kernel package's cached
kernels when they differ (`drop_stale_kernel_caches`), in every folder numba may cache them in:
`__pycache__` beside the sources, the folder numba maps them to under `NUMBA_CACHE_DIR` (CI,
containers, read-only installs), and the user-wide cache numba falls back to.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba

JIT_OPTIONS = {"cache": True, "nogil": True}
_STAMP = "maskbeam-kernels.sha256"
_CACHE_SUFFIXES = (".nbi", ".nbc")


def kernels_digest(folder: Path) -> str:
    """sha256 over the names and sources of the kernel modules in `folder` and its subpackages."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _probe() -> None:
    """A stand-in function for numba's cache locators, which read only its line number."""


def kernel_cache_folders(folder: Path) -> list[Path]:
    """The folders numba may cache the kernels of `folder`'s modules in, in the order it tries them:
    under `NUMBA_CACHE_DIR` when it is set (numba maps each source folder to a subfolder of its own
    there), `__pycache__` beside the sources, the user-wide cache. Asked of numba's own locators, so
    the mapping is the one numba uses."""
    from numba.core import caching, config

    source = str(folder / "__init__.py")
    locators = [caching.InTreeCacheLocator, caching.UserWideCacheLocator]
    if config.CACHE_DIR:
        locators.insert(0, caching.UserProvidedCacheLocator)
    return [Path(locator(_probe, source).get_cache_path()) for locator in locators]


def _drop_stale(cache: Path, current: str, create: bool) -> int:
    """Drop numba's cache files in `cache` unless its stamp says they were built from `current`."""
    stamp = cache / _STAMP
    try:
        if stamp.read_text() == current:
            return 0
    except OSError:
        pass
    removed = 0
    try:
        if create:
            cache.mkdir(parents=True, exist_ok=True)
        elif not cache.is_dir():
            return 0
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
    except OSError:  # unwritable: numba does not cache there either
        pass
    return removed


def drop_stale_kernel_caches(folder: Path) -> int:
    """Remove numba's cache files of `folder`'s kernels, in every folder numba may cache them in
    (`kernel_cache_folders`), unless they were built from the sources there now; returns how many
    were removed. Safe when several processes start at once: a file another process is loading is
    simply compiled again; an unwritable cache folder is left alone. The folder numba tries first
    is made (with its stamp) when missing; the others are only checked when they exist."""
    current = kernels_digest(folder)
    packages = sorted({path.parent for path in folder.rglob("*.py")} | {folder})
    return sum(_drop_stale(cache, current, create=index == 0)
               for package in packages
               for index, cache in enumerate(kernel_cache_folders(package)))


drop_stale_kernel_caches(Path(__file__).resolve().parents[1])  # every kernel package: pipeline/kernels


def numba_registries_without_scipy() -> None:
    """Import numba's array-math registry with scipy.linalg hidden, unless either is imported already.

    numba loads its registries on a process's first compile or cache load, and `numba.np.arraymath`
    then probes for BLAS by importing scipy.linalg (0.2-0.3 CPU-seconds of every worker's start)
    only to choose how numpy's covariance functions take inner products. No kernel here calls a BLAS
    function (`tests/kernels/test_jit_cache.py` checks the sources); the dot product and linear
    algebra in anyone's kernels still import scipy when they are compiled, as before."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None  # the import system raises ImportError for a None entry
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if "scipy.linalg" in sys.modules and sys.modules["scipy.linalg"] is None:
            del sys.modules["scipy.linalg"]


numba_registries_without_scipy()


def kernel(*signatures: Any, **extra: Any) -> Callable:
    """`@kernel()` or `@kernel(sig, ...)`: numba.njit with the project's options (plus `extra`)."""
    if signatures:
        return numba.njit(list(signatures), **JIT_OPTIONS, **extra)
    return numba.njit(**JIT_OPTIONS, **extra)


def helper(function: Callable) -> Callable:
    """`@helper`: a kernel called from other kernels only. numba compiles no CPython or C wrapper for
    it (less compile time and cache); calling one from Python is not possible (it crashes)."""
    return numba.njit(**JIT_OPTIONS, no_cpython_wrapper=True, no_cfunc_wrapper=True)(function)
