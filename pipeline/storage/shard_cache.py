"""Local copies of remote shards (s3://, gs://, hf://...), so training reads them like local ones
(`shard_rows`) instead of holding each shard on every worker's heap.

Copies are content-addressed by the shard's sha256 from the manifest (`CACHE/ab/abcdef....arrow`),
verified while they download, written under a temporary name and renamed, so a killed download
never leaves a bad copy and two outputs sharing a shard share the copy. `limit` bounds the cache:
least recently used copies of other shards are evicted to make room. A split larger than the limit
is read in windows of shards (`ShardWindows`): the sampler shuffles shards, then rows within a
window of k shards, and the cache holds the previous, current and next windows, downloading the
next in the background while the current one trains.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.storage import filesystem

DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "maskbeam", "shards")
_CHUNK = 8 * 1024 * 1024


class ShardCacheError(OSError):
    """A shard could not be cached (too large for the limit, or its bytes do not match the manifest)."""


def _local_path(cache_dir: str, sha256: str) -> Path:
    return Path(cache_dir) / sha256[:2] / f"{sha256}.arrow"


def local_path(cache_dir: str | None, sha256: str) -> str:
    """Where a shard's verified copy lives (it may not be there yet)."""
    return str(_local_path(cache_dir or DEFAULT_CACHE_DIR, sha256))


def fetch(url: str, sha256: str, size: int, cache_dir: str | None = None, limit: int | None = None,
          keep: set[str] | None = None) -> str:
    """The local copy of one shard, downloaded now if it is missing; with `limit`, least recently
    used copies other than `keep` (paths) are evicted first to make room."""
    cache_dir = cache_dir or DEFAULT_CACHE_DIR
    path = _local_path(cache_dir, sha256)
    if not (path.exists() and path.stat().st_size == size):
        if limit is not None:
            _make_room(cache_dir, size, {Path(p) for p in keep or ()} | {path}, limit)
        _download(url, sha256, size, path)
    return str(path)


def _download(url: str, sha256: str, size: int, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}-{threading.get_ident()}")
    digest = hashlib.sha256()
    with filesystem.open_binary(url) as source, open(partial, "wb") as sink:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            sink.write(chunk)
    if digest.hexdigest() != sha256 or partial.stat().st_size != size:
        partial.unlink()
        raise ShardCacheError(f"{url}: downloaded bytes do not match the manifest (sha256 {digest.hexdigest()}, "
                              f"expected {sha256}); the output changed or is corrupt")
    os.replace(partial, target)


def _make_room(cache_dir: str, needed: int, keep: set[Path], limit: int) -> None:
    copies = [p for p in Path(cache_dir).glob("*/*.arrow") if p not in keep]
    used = sum(p.stat().st_size for p in Path(cache_dir).glob("*/*.arrow"))
    for old in sorted(copies, key=lambda p: p.stat().st_atime):  # least recently used first
        if used + needed <= limit:
            break
        used -= old.stat().st_size
        old.unlink(missing_ok=True)


def cached_shards(shards: list[tuple[str, str, int]], cache_dir: str | None = None, limit: int | None = None,
                  parallel: int = 4, keep: Sequence[str] = ()) -> list[str]:
    """Local paths of `shards` ((url, sha256, bytes) each), downloading what is not cached yet,
    `parallel` at a time; `keep`: other copies never evicted to make room (their bytes count)."""
    cache_dir = cache_dir or DEFAULT_CACHE_DIR
    total = sum(size for _, _, size in shards)
    pinned = sum(os.path.getsize(p) for p in keep if os.path.exists(p))
    if limit is not None and total + pinned > limit:
        besides = f" (besides {pinned / 1e6:,.0f} MB of copies kept for another split)" if pinned else ""
        raise ShardCacheError(f"the split is {total / 1e6:,.0f} MB{besides} but the shard cache limit is "
                              f"{limit / 1e6:,.0f} MB: "
                              "raise --cache_limit (or free disk); shards are read in a global random order, "
                              "so the whole split must fit")
    paths = [_local_path(cache_dir, sha) for _, sha, _ in shards]
    missing = [(url, sha, size, path) for (url, sha, size), path in zip(shards, paths)
               if not (path.exists() and path.stat().st_size == size)]
    if limit is not None and missing:
        _make_room(cache_dir, sum(size for _, _, size, _ in missing), {*paths, *map(Path, keep)}, limit)
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(lambda item: _download(*item), missing))
    for path in paths:
        os.utime(path)  # recently used
    return [str(p) for p in paths]


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


class ShardWindows:
    """Keeps the shards of the windows a sampler is about to read in the cache: on entering a
    window, evicts least recently used copies outside the previous, current and next windows (and
    earlier ones still being read), then downloads the current and next windows' missing shards in
    a background thread, so training waits only if a window is read faster than the next one
    downloads. Downloads in flight count as cached, and one that lands after its window was left
    behind is deleted, so the cache stays within its limit however fast windows go by."""

    def __init__(self, shards: list[tuple[str, str, int]], cache_dir: str | None, limit: int,
                 parallel: int = 4, pinned: Sequence[str] = ()) -> None:
        """`pinned`: copies of another split (validation) never evicted; their bytes count in `limit`."""
        self.shards = shards
        self.cache_dir = cache_dir or DEFAULT_CACHE_DIR
        self.limit = limit
        self._pinned = {Path(p) for p in pinned}
        self._pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="maskbeam-prefetch")
        self._lock = threading.Lock()
        self._previous: list[int] = []
        self._keep: set[int] = set()
        self._in_flight: set[int] = set()
        self.downloads = 0

    def __getstate__(self) -> dict:
        raise TypeError("ShardWindows stays in the process that runs the sampler")

    def _path(self, i: int) -> Path:
        return _local_path(self.cache_dir, self.shards[i][1])

    def enter(self, current: list[int], upcoming: list[int], behind: list[int] = ()) -> None:
        """The sampler starts handing out rows of `current`; `upcoming` comes next; `behind` are
        earlier shards whose rows DataLoader workers may still be gathering. The limit holds while
        the loader prefetches fewer rows than a window holds (batch x workers x prefetch_factor)."""
        with self._lock:
            self._keep = {*behind, *self._previous, *current, *upcoming}
            missing = [i for i in dict.fromkeys([*current, *upcoming])
                       if i not in self._in_flight and not self._path(i).exists()]
            landing = sum(self.shards[i][2] for i in self._in_flight) + sum(self.shards[i][2] for i in missing)
            _make_room(self.cache_dir, landing, {self._path(i) for i in self._keep} | self._pinned, self.limit)
            for i in missing:
                self._in_flight.add(i)
                self.downloads += 1
                self._pool.submit(self._fetch, i)
            self._previous = list(current)

    def _fetch(self, i: int) -> None:
        try:
            fetch(*self.shards[i], self.cache_dir)
        finally:
            with self._lock:
                self._in_flight.discard(i)
                if i not in self._keep:  # its window went by while it downloaded
                    self._path(i).unlink(missing_ok=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
