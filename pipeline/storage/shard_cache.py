"""Local copies of remote shards (s3://, gs://, hf://...), so training reads them like local ones
(`shard_rows`) instead of holding each shard on every worker's heap.

`ShardCache` owns one cache folder for one process: where a copy lives, downloads (verified,
written under a temporary name and renamed, background ones on its own threads), eviction to a
byte limit, partial files, and shutdown. Copies are content-addressed by the shard's sha256 from the
manifest (`CACHE/ab/<sha256>.arrow`): that name is checked (64 hex digits) and every path stays
inside the cache, so a manifest cannot name a file elsewhere. The processes sharing a folder (the
ranks of a node, DataLoader workers) coordinate with file locks (`cache_locks`): a shard is
downloaded by one of them at a time, eviction runs in one at a time and skips copies another one
keeps, and a download in flight counts in the limit at its full size.

A split larger than the limit is read in windows of shards (`shard_windows.ShardWindows`).

A copy is trusted by its content, never by its name: the first time a process uses a copy it did
not download itself, it hashes it (sha256, streamed) and compares it with the manifest's; a copy
that does not match (bytes overwritten in place, another file put there) is downloaded again. The
process then remembers the copy it checked by inode, size and modification time (the LRU touch
changes only the access time), so a copy is hashed once per process, not at every open.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import queue
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pipeline.storage import filesystem
from pipeline.storage.cache_locks import FileLock, try_lock

DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "maskbeam", "shards")
_CHUNK = 8 * 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PARTIAL = ".partial-"
_log = logging.getLogger("maskbeam.cache")


class ShardCacheError(OSError):
    """A shard could not be cached (too large for the limit, or its bytes do not match the manifest)."""


class _Stopped(Exception):
    """A download abandoned because its cache was closed."""


def local_path(cache_dir: str | None, sha256: str) -> str:
    """Where a shard's verified copy lives (it may not be there yet).

    Raises:
        ShardCacheError: `sha256` is not 64 lowercase hex digits (it names a file: nothing else may).
    """
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ShardCacheError(f"a shard's sha256 must be 64 lowercase hex digits, got {sha256!r}: the manifest is "
                              "damaged or crafted")
    root = Path(cache_dir or DEFAULT_CACHE_DIR).resolve()
    path = (root / sha256[:2] / f"{sha256}.arrow").resolve()
    if path.parent.parent != root:  # e.g. a symlinked sub-folder pointing out of the cache
        raise ShardCacheError(f"cache path {path} is outside the cache {root}")
    return str(path)


class ShardCache:
    """The shard cache folder `cache_dir` (default ~/.cache/maskbeam/shards) as used by this process.

    Args:
        cache_dir: the folder; shared safely with other processes on this machine.
        limit: bytes the folder may hold (copies plus downloads in flight); None: unbounded.
        parallel: background download threads (`prefetch`) and parallel downloads (`fetch_all`).
    """

    def __init__(self, cache_dir: str | None = None, limit: int | None = None, *, parallel: int = 4) -> None:
        if limit is not None and limit <= 0:
            raise ValueError(f"cache limit must be > 0 bytes, got {limit}")
        self.cache_dir = str(Path(cache_dir or DEFAULT_CACHE_DIR).resolve())
        self.limit = limit
        self.parallel = max(1, parallel)
        self.downloads = 0  # shards this process downloaded
        self.partials_removed = 0  # partial files of failed or abandoned downloads this process removed
        self.over_limit = 0  # times room could not be made (everything else kept by some process)
        self._pins: dict[str, FileLock] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pid = os.getpid()
        _live.add(self)

    def __getstate__(self) -> dict:
        """What a DataLoader worker (spawned) gets: the folder and limit, no threads, pins or queue."""
        return {"cache_dir": self.cache_dir, "limit": self.limit, "parallel": self.parallel}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["cache_dir"], state["limit"], parallel=state["parallel"])

    def _own(self) -> None:
        """In a forked child (a DataLoader worker): its own counters, no pins, threads or queue."""
        if self._pid != os.getpid():
            self.__init__(self.cache_dir, self.limit, parallel=self.parallel)

    def path(self, sha256: str) -> str:
        return local_path(self.cache_dir, sha256)

    def has(self, sha256: str, size: int) -> bool:
        path = self.path(sha256)
        return os.path.exists(path) and os.path.getsize(path) == size

    # -- downloads ---------------------------------------------------------------------------------

    def fetch(self, url: str, sha256: str, size: int, keep: Iterable[str] = ()) -> str:
        """The local copy of one shard, downloaded now if missing (or waiting for the process that
        is downloading it); room is made by evicting least recently used copies other than `keep`
        and those other processes keep."""
        self._own()
        path = self.path(sha256)
        if self._hit(path, sha256, size):
            return path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with FileLock(path.removesuffix(".arrow") + ".lock"):
            if self._hit(path, sha256, size):  # another process or thread downloaded it meanwhile
                return path
            self._download(url, sha256, size, path, set(keep))
        return path

    def _hit(self, path: str, sha256: str, size: int) -> bool:
        """Whether the copy at `path` is the shard: its size, then (once per process and copy) its
        sha256; a hit is marked recently used."""
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return False
        if stat.st_size != size:
            return False
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if _verified.get(path) != key:
            found = file_sha256(path)
            if found != sha256:
                _log.warning("shard cache: %s has sha256 %s..., not the manifest's %s... (changed after it was "
                             "downloaded): downloading it again", path, found[:16], sha256[:16])
                return False
            _verified[path] = key
        os.utime(path, ns=(time.time_ns(), stat.st_mtime_ns))  # recently used; the checked mtime kept
        return True

    def _download(self, url: str, sha256: str, size: int, target: str, keep: set[str]) -> None:
        """Download under the shard's lock: room first, then a partial file of the full size (so
        other processes count it), verified, renamed; removed on any failure."""
        partial = f"{target.removesuffix('.arrow')}{_PARTIAL}{os.getpid()}-{threading.get_ident()}"
        with self._lock:
            self.downloads += 1
        try:
            with self._cache_lock():
                if self.limit is not None:
                    self._make_room(size, keep | {target})
                with open(partial, "wb") as sink:
                    sink.truncate(size)  # reserved: counts in every process's accounting
            digest = hashlib.sha256()
            with filesystem.open_binary(url) as source, open(partial, "r+b") as sink:
                while chunk := source.read(_CHUNK):
                    if self._stop.is_set() and getattr(_background, "cache", None) is self:
                        raise _Stopped(url)  # a prefetch of a closed cache; a reader's own fetch goes on
                    digest.update(chunk)
                    sink.write(chunk)
                written = sink.tell()
                sink.truncate(written)
            if digest.hexdigest() != sha256 or written != size:
                raise ShardCacheError(f"{url}: downloaded bytes do not match the manifest ({written:,} bytes, sha256 "
                                      f"{digest.hexdigest()}; expected {size:,} and {sha256}): the output changed or "
                                      "is corrupt")
            os.replace(partial, target)
            stat = os.stat(target)
            _verified[target] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)  # hashed while it was written
        except BaseException:
            if os.path.exists(partial):
                os.unlink(partial)
                with self._lock:
                    self.partials_removed += 1
            raise

    def fetch_all(self, shards: Sequence[tuple[str, str, int]], keep: Iterable[str] = ()) -> list[str]:
        """Local paths of `shards` ((url, sha256, bytes) each), downloading what is missing,
        `parallel` at a time; none of them (nor `keep`) is evicted to make room for another."""
        keep = {*keep, *(self.path(sha) for _, sha, _ in shards)}
        errors: list[BaseException] = []
        todo = queue.SimpleQueue()
        for shard in shards:
            todo.put(shard)

        def work() -> None:
            while not errors:
                try:
                    shard = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    self.fetch(*shard, keep=keep)
                except BaseException as error:  # noqa: BLE001 - re-raised below, in the caller's thread
                    errors.append(error)

        threads = [threading.Thread(target=work, name="maskbeam-fetch") for _ in range(min(self.parallel, len(shards)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [self.path(sha) for _, sha, _ in shards]

    def prefetch(self, url: str, sha256: str, size: int, done: Callable[[str, BaseException | None], None]) -> None:
        """Download one shard in the background; `done(path, error)` is called in that thread."""
        self._own()
        if self._stop.is_set():
            raise ShardCacheError("the shard cache was closed")
        self._queue.put((url, sha256, size, done))
        with self._lock:
            if len(self._threads) < self.parallel:
                thread = threading.Thread(target=self._worker, name="maskbeam-prefetch", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _worker(self) -> None:
        _background.cache = self
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None or self._stop.is_set():
                return
            url, sha256, size, done = item
            try:
                path, error = self.fetch(url, sha256, size, keep=self.pinned()), None
            except _Stopped:
                return
            except BaseException as failure:  # noqa: BLE001 - handed to the caller's callback
                path, error = self.path(sha256), failure
            done(path, error)

    # -- eviction and pins -------------------------------------------------------------------------

    def pin(self, paths: Iterable[str]) -> None:
        """Keep exactly these copies (those present now; call again as they land): no process
        sharing the folder evicts them while this cache pins them."""
        self._own()
        wanted = {str(p) for p in paths}
        with self._lock:
            for path in set(self._pins) - wanted:
                self._pins.pop(path).release()
            for path in wanted - set(self._pins):
                lock = try_lock(path, shared=True)
                if lock is not None:
                    self._pins[path] = lock

    def pinned(self) -> set[str]:
        with self._lock:
            return set(self._pins)

    def make_room(self, needed: int, keep: Iterable[str] = ()) -> None:
        """Evict until `needed` more bytes fit in the limit (a no-op without a limit)."""
        if self.limit is None:
            return
        with self._cache_lock():
            self._make_room(needed, set(keep))

    def _cache_lock(self) -> FileLock:
        """The lock of the whole folder (eviction and reservations)."""
        os.makedirs(self.cache_dir, exist_ok=True)
        return FileLock(os.path.join(self.cache_dir, ".lock"))

    def _make_room(self, needed: int, keep: set[str]) -> None:
        """Under the cache's lock: remove the partial files of downloads nobody runs, then evict
        least recently used copies that no process keeps until `needed` more bytes fit."""
        root = Path(self.cache_dir)
        used, copies = 0, []
        for path in root.glob("*/*"):
            name = path.name
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if _PARTIAL in name:
                owner = try_lock(str(path.parent / name.split(_PARTIAL)[0]) + ".lock", create=True)
                if owner is not None:  # nobody downloads that shard: left by a failed or killed download
                    owner.release()
                    path.unlink(missing_ok=True)
                    with self._lock:
                        self.partials_removed += 1
                    continue
                used += stat.st_size
            elif name.endswith(".arrow"):
                used += stat.st_size
                if str(path) not in keep:
                    copies.append((stat.st_atime, str(path), stat.st_size))
        for _, path, size in sorted(copies):  # least recently used first
            if used + needed <= self.limit:
                return
            evict = try_lock(path)  # an exclusive lock: no process keeps it
            if evict is None:
                continue
            with evict:
                os.unlink(path)
            used -= size
        if used + needed > self.limit:
            with self._lock:
                self.over_limit += 1
            _log.warning("shard cache %s: %s bytes needed but only copies kept by running readers are left "
                         "(%s of %s bytes used)", self.cache_dir, f"{needed:,}", f"{used:,}", f"{self.limit:,}")

    def discard(self, path: str) -> bool:
        """Delete a copy unless some process keeps it; whether it was deleted."""
        evict = try_lock(path)
        if evict is None:
            return False
        with evict:
            os.unlink(path)
        return True

    def used_bytes(self) -> int:
        """Bytes of copies and partial files in the folder now."""
        return sum(p.stat().st_size for p in Path(self.cache_dir).glob("*/*") if ".lock" not in p.name
                   and p.exists())

    # -- shutdown ----------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop: queued downloads are dropped, those in flight abandoned at their next chunk (their
        partial files removed), pins released. Also run at interpreter exit, which therefore never
        waits for queued downloads."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        self.pin(())

    def __enter__(self) -> ShardCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_sha256(path: str) -> str:
    """sha256 of a local file, read in chunks (bounded memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# path -> (inode, size, mtime_ns) of the copy this process hashed (or downloaded) there; a forked
# child inherits what its parent checked, which is the same file.
_verified: dict[str, tuple[int, int, int]] = {}
_live: weakref.WeakSet[ShardCache] = weakref.WeakSet()
_background = threading.local()  # .cache: the cache whose prefetch thread this is


@atexit.register
def _close_all() -> None:
    for cache in list(_live):
        if cache._pid == os.getpid():
            cache.close(timeout=1.0)  # a download stalled in a read cannot be interrupted: do not wait for it


def window_size(shard_bytes: list[int], limit: int) -> int:
    """Shards per window so that three windows (previous, current, next) fit in `limit`.

    Raises:
        ShardCacheError: when not even three of the largest shards fit.
    """
    largest = max(shard_bytes)
    k = limit // (3 * largest)
    if k < 1:
        raise ShardCacheError(f"the shard cache limit is {limit / 1e6:,.0f} MB but reading a split larger than it "
                              f"needs room for three windows of at least one shard: at least "
                              f"{3 * largest / 1e6:,.0f} MB (three of its largest shards); raise --cache_limit")
    return int(k)


def cached_shards(shards: list[tuple[str, str, int]], cache_dir: str | None = None, limit: int | None = None,
                  parallel: int = 4, keep: Sequence[str] = ()) -> list[str]:
    """Local paths of `shards` ((url, sha256, bytes) each), downloading what is not cached yet;
    `keep`: other copies never evicted to make room (their bytes count).

    Raises:
        ShardCacheError: the shards and `keep` do not fit in `limit`, or a download does not match.
    """
    pinned = sum(os.path.getsize(p) for p in keep if os.path.exists(p))
    total = sum(size for _, _, size in shards)
    if limit is not None and total + pinned > limit:
        besides = f" (besides {pinned / 1e6:,.0f} MB of copies kept for another split)" if pinned else ""
        raise ShardCacheError(f"the split is {total / 1e6:,.0f} MB{besides} but the shard cache limit is "
                              f"{limit / 1e6:,.0f} MB: "
                              "raise --cache_limit (or free disk); shards are read in a global random order, "
                              "so the whole split must fit")
    cache = ShardCache(cache_dir, limit, parallel=parallel)
    try:
        return cache.fetch_all(shards, keep=keep)
    finally:
        cache.close()


def fetch(url: str, sha256: str, size: int, cache_dir: str | None = None, limit: int | None = None,
          keep: set[str] | None = None) -> str:
    """The local copy of one shard (a one-off `ShardCache(cache_dir, limit).fetch`)."""
    return ShardCache(cache_dir, limit).fetch(url, sha256, size, keep=keep or ())
