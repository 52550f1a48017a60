"""Probed tables kept on disk between processes: building one asks the real tokenizer (or the
normalizer) about every code point, seconds that every worker of every job would pay again.

A table is a set of named numpy arrays in one `.npz` (loaded without pickle), named by a hash of
what it depends on; an unreadable or incomplete file is built again and replaced atomically.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE_ENV = "MASKBEAM_CACHE"


def cache_root() -> Path:
    """`$MASKBEAM_CACHE`, else ~/.cache/maskbeam."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "maskbeam")


def cached_arrays(kind: str, key: str, names: tuple[str, ...],
                  build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays `names` of the table `kind` for `key` (everything the table depends on, as text):
    from the cache when an earlier process built them, else `build()`, stored for the next."""
    path = cache_root() / "code-points" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"
    try:
        with np.load(path) as saved:
            return {name: saved[name] for name in names}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # missing, torn or foreign: build
        pass
    arrays = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as handle:
            np.savez(handle, **{name: arrays[name] for name in names})
        os.replace(handle.name, path)
    except OSError:
        pass  # a read-only home: build again next time
    return arrays
