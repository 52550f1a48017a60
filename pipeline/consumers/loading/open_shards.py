"""The shard files one process has open for row gathers, least recently used closed past a cap.

A large output has thousands of shards and a random batch touches hundreds; every open pread shard
holds a file descriptor, so past `cap` the least recently used are closed (pread reopens one with a
single `open`, its layout kept) and a DataLoader worker stays under the usual limit of 1,024 open
files. A closed reader finishes the gathers in flight on other threads first (`PreadShard.close`).
Opened per process: a forked or spawned DataLoader worker starts with none.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from pipeline.storage.shard_rows import Column, MappedShard, PreadShard, ShardLayout, open_shard

# Shard files one process keeps open (a file descriptor each).
MAX_OPEN_SHARDS = 256


class OpenShards:
    """Readers of the shards of one split in this process.

    Args:
        columns: the columns to gather.
        read_mode: 'pread' or 'mmap' (`shard_rows`).
        cap: how many to keep open; None reads `MAX_OPEN_SHARDS` at each opening.
    """

    def __init__(self, columns: list[Column], read_mode: str, cap: int | None = None) -> None:
        self.columns = columns
        self.read_mode = read_mode
        self.cap = cap
        self._reset()

    def _reset(self) -> None:
        self._readers: OrderedDict[int, PreadShard | MappedShard] = OrderedDict()  # least recent first
        self._layouts: dict[int, ShardLayout] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return {"columns": self.columns, "read_mode": self.read_mode, "cap": self.cap}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def recent(self) -> list[int]:
        """Shards open now, least recently used first."""
        with self._lock:
            return list(self._readers)

    def get(self, i: int, path_of: Callable[[int], str], rows: int) -> PreadShard | MappedShard:
        """The reader of shard i, opened at `path_of(i)` if it is not open; `path_of` is called again
        (up to three times) when the file vanished between it and the opening (a cached copy
        evicted by another process).

        Raises:
            ValueError: the file holds another number of rows than `rows` (from the manifest).
        """
        if self._pid != os.getpid():
            self._reset()
        with self._lock:
            if i in self._readers:
                self._readers.move_to_end(i)
                return self._readers[i]
            layout = self._layouts.get(i)
        for attempt in range(3):
            path = path_of(i)
            try:
                reader = open_shard(path, self.columns, self.read_mode, layout)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        if reader.rows != rows:
            reader.close()
            raise ValueError(f"shard {path} holds {reader.rows} rows, the manifest says {rows}")
        cap = self.cap if self.cap is not None else MAX_OPEN_SHARDS
        with self._lock:
            if i in self._readers:  # opened meanwhile by another thread: keep one
                reader.close()
                return self._readers[i]
            self._readers[i] = reader
            if reader.layout is not None:
                self._layouts[i] = reader.layout
            while len(self._readers) > max(cap, 1):
                self._readers.popitem(last=False)[1].close()
        return reader

    def close(self) -> None:
        with self._lock:
            readers, self._readers = list(self._readers.values()), OrderedDict()
        for reader in readers:
            reader.close()
