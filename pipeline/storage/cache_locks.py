"""File locks that coordinate the processes sharing one shard cache folder (the ranks of a node,
their DataLoader workers): `flock` locks on small lock files and on the cached copies themselves.

- A download holds its shard's lock file exclusively (`ab/<sha256>.lock`): a second process that
  wants the same shard waits for it and then finds the copy, instead of downloading it again.
- Eviction holds the cache's lock (`.lock` in the cache root) exclusively, so two processes never
  evict and reserve room at once.
- A process that needs a copy kept (the windows it reads, the copies of another split it keeps)
  holds a shared lock on the copy itself; eviction, in any process, skips a copy it cannot lock
  exclusively.

A forked child (a DataLoader worker) inherits the descriptors, and a `flock` lock lives as long as
any descriptor of its open file does: every descriptor opened here is closed in a forked child at
once, so a child never holds a lock of its parent past the parent's release.

Where there is no `fcntl` (Windows) the locks are no-ops: one process per cache folder.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

try:
    import fcntl
except ImportError:  # not POSIX (Windows): no locks, one process per cache folder
    fcntl = None

_open: weakref.WeakSet[FileLock] = weakref.WeakSet()
_registry_lock = threading.Lock()


class FileLock:
    """An open lock file (or cached copy) and whether it is locked; `release` closes it."""

    def __init__(self, path: str, *, shared: bool = False, blocking: bool = True, create: bool = True) -> None:
        """Lock `path` (exclusively, or `shared`); `blocking=False` raises BlockingIOError when held
        elsewhere; `create=False` raises FileNotFoundError when `path` is missing."""
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self.path = path
        self._fd = -1
        self._fd = os.open(path, flags, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(self._fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        with _registry_lock:
            _open.add(self)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)  # closing the last descriptor of the open file releases the lock

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def try_lock(path: str, *, shared: bool = False, create: bool = False) -> FileLock | None:
    """A lock on `path` if nobody holds a conflicting one; None if somebody does or `path` is gone."""
    try:
        return FileLock(path, shared=shared, blocking=False, create=create)
    except (BlockingIOError, FileNotFoundError):
        return None


def _close_inherited() -> None:
    """In a forked child: close the inherited descriptors without touching the parent's locks."""
    for lock in list(_open):
        if lock._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(lock._fd)
            lock._fd = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)
