"""Reading a split larger than the shard cache: windows of shards.

The sampler shuffles shards, then rows within a window of k shards, and tells the windows object
which window it enters (`enter`): the cache then keeps the previous, current and next windows (and
earlier ones whose rows DataLoader workers may still be gathering), evicts the rest, and downloads
the current and next windows' missing shards in the background, so training waits only if a window
is read faster than the next one downloads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pipeline.storage.shard_cache import ShardCache, ShardCacheError, window_size


class ShardWindows:
    """The windows of one split on one `ShardCache` (which owns the downloads, eviction and shutdown).

    Args:
        cache: the cache, with a limit.
        shards: (url, sha256, bytes) of every shard of the split, in manifest order.
        kept: copies of another split (validation) never evicted; their bytes count in the limit.

    Raises:
        ShardCacheError: the limit (less `kept`) cannot hold three windows of one shard each.
    """

    def __init__(self, cache: ShardCache, shards: list[tuple[str, str, int]], kept: Sequence[str] = ()) -> None:
        if cache.limit is None:
            raise ValueError("windows need a cache with a limit")
        self.cache = cache
        self.shards = shards
        self.paths = [cache.path(sha) for _, sha, _ in shards]
        self._kept = [str(p) for p in kept]
        self._previous: list[int] = []
        self._keep: set[int] = set()
        self._in_flight: set[int] = set()
        self.errors: list[BaseException] = []
        self.downloads = 0  # background downloads started
        budget = cache.limit - self.kept_bytes()
        try:
            self.window_shards = window_size([size for _, _, size in shards], budget)
        except ShardCacheError as error:
            if budget == cache.limit:
                raise
            raise ShardCacheError(f"{error} (the limit less the {(cache.limit - budget) / 1e6:,.0f} MB of kept "
                                  "copies of another split, e.g. the validation split)") from None
        cache.pin(self._kept)

    def kept_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in self._kept if os.path.exists(p))

    def __getstate__(self) -> dict:
        raise TypeError("ShardWindows stays in the process that runs the sampler")

    def keep(self) -> set[str]:
        """Copies not to evict now: the windows in use and the kept split."""
        return {*(self.paths[i] for i in self._keep), *self._kept}

    def enter(self, current: list[int], upcoming: list[int], behind: Sequence[int] = ()) -> None:
        """The sampler starts handing out rows of `current`; `upcoming` comes next; `behind` are
        earlier shards whose rows DataLoader workers may still be gathering. The limit holds while
        the loader prefetches fewer rows than a window holds (batch x workers x prefetch_factor)."""
        cache = self.cache
        with cache._lock:
            self._keep = {*behind, *self._previous, *current, *upcoming}
            missing = [i for i in dict.fromkeys([*current, *upcoming])
                       if i not in self._in_flight and not cache.has(self.shards[i][1], self.shards[i][2])]
            self._in_flight.update(missing)
            self._previous = list(current)
        cache.pin(self.keep())  # pins only copies present; others are pinned as they land
        landing = sum(self.shards[i][2] for i in self._in_flight)
        cache.make_room(landing, self.keep())
        for i in missing:
            self.downloads += 1
            cache.prefetch(*self.shards[i], done=lambda path, error, i=i: self._landed(i, path, error))

    def _landed(self, i: int, path: str, error: BaseException | None) -> None:
        cache = self.cache
        with cache._lock:
            self._in_flight.discard(i)
            wanted = i in self._keep
        if error is not None:
            self.errors.append(error)  # the reader's own fetch of it raises it again, where it is seen
            return
        if wanted:
            cache.pin(self.keep())
        else:  # its window went by while it downloaded
            cache.discard(path)

    def close(self) -> None:
        self.cache.close()
