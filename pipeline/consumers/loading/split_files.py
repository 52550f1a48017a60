"""Where the shard files of one split are read from, and how many rows they can hold.

Local shards are read in place. Remote ones (s3://, gs://, hf://) are read from verified local
copies in a `ShardCache`: all of them when the split fits in the cache limit, else window by window
(`ShardWindows`, driven by the sampler).

The manifest's row counts size the dataset, hence the sampler's permutation: a crafted manifest
(`rows: 5e9`) would have it ask for tens of GiB. So rows are checked against the files before any
allocation sized by them: each shard's bytes (the file's size; for a remote split read in windows,
the object store's listing, which must equal the manifest's bytes) bound its rows by the smallest
row the shard schema allows; the exact count is checked when a shard is opened (`OpenShards`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

from pipeline.consumers.outputs import shard_paths
from pipeline.storage import filesystem
from pipeline.storage.shard_cache import ShardCache, ShardCacheError
from pipeline.storage.shard_windows import ShardWindows
from schemas import manifest as m


class ManifestMismatch(ValueError):
    """The manifest's numbers for a shard do not fit the shard's file."""


def min_row_bytes(seq_len: int, static: bool) -> int:
    """The fewest bytes one row can take in a shard file: int16 ids and labels, int8 attention, or a
    uint64 mask seed for dynamic output."""
    return 3 * seq_len + (2 * seq_len if static else 8)


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestMismatch(f"{what} must be a non-negative integer, got {value!r}")
    return value


class SplitFiles:
    """The shard files of one split, local or through a cache.

    Args:
        directory: the output folder (local path or URL).
        manifest: its manifest.
        split: the split's name.
        seq_len: the row length (for the row bound).
        static: stored masks (for the row bound).
        cache_dir, cache_limit, keep_cached: the shard cache of a remote output (see MlmShardDataset).

    Raises:
        ManifestMismatch: a shard's rows cannot fit in its file, or its bytes differ from the store's.
        ShardCacheError: a remote shard cannot be cached (limit, mismatching download).
    """

    def __init__(self, directory: str, manifest: dict, split: str, seq_len: int, static: bool, *,
                 cache_dir: str | None = None, cache_limit: int | None = None,
                 keep_cached: Sequence[str] = ()) -> None:
        self.urls = shard_paths(directory, manifest, split)  # the split and shard names are checked there
        entries = manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]
        names = [posixpath.basename(url) for url in self.urls]
        self.rows = [_count(e[m.KEY_ROWS], f"rows of shard {name!r}") for e, name in zip(entries, names)]
        declared = [_count(e[m.KEY_BYTES], f"bytes of shard {name!r}") for e, name in zip(entries, names)]
        self.cache: ShardCache | None = None
        self.windows: ShardWindows | None = None
        self.kept = [str(p) for p in keep_cached]
        if filesystem.is_local(directory):
            self.paths = [url.removeprefix("file://") for url in self.urls]
            sizes = [_size(path) for path in self.paths]
        else:
            self.remote = [(url, e[m.KEY_SHA256], size) for url, e, size in zip(self.urls, entries, declared)]
            self.cache = ShardCache(cache_dir, cache_limit)
            self.paths = [self.cache.path(sha) for _, sha, _ in self.remote]  # checks every sha256
            kept = sum(os.path.getsize(p) for p in self.kept if os.path.exists(p))
            if cache_limit is None or sum(declared) + kept <= cache_limit:
                self.cache.pin(self.kept)
                self.cache.fetch_all(self.remote, keep=self.kept)  # verified: sizes are the manifest's
                sizes = declared
            else:
                sizes = _listed_sizes(filesystem.join(directory, split), names, declared)
                self.windows = ShardWindows(self.cache, self.remote, kept=self.kept)
        smallest = min_row_bytes(seq_len, static)
        for name, rows, size in zip(names, self.rows, sizes):
            if rows * smallest > size:
                raise ManifestMismatch(f"shard {name!r}: the manifest says {rows:,} rows but its file has {size:,} "
                                       f"bytes, room for at most {size // smallest:,} rows of {seq_len} tokens")

    @property
    def window_shards(self) -> int:
        return self.windows.window_shards if self.windows else 0

    def local_copy(self, i: int, keep: Sequence[int] = ()) -> str:
        """The local path of shard i: in place, or its cached copy, downloaded again if it is gone
        (`keep`: shards this process has open, not evicted to make room)."""
        if self.cache is None:
            return self.paths[i]
        wanted = {*self.kept, *(self.paths[j] for j in keep)}
        if self.windows is not None:
            wanted |= self.windows.keep()
        return self.cache.fetch(*self.remote[i], keep=wanted)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["windows"] = None  # the prefetcher stays with the sampler, in the main process
        return state

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"shard {path} named in the manifest is missing") from None


def _listed_sizes(folder: str, names: list[str], declared: list[int]) -> list[int]:
    """The sizes of a remote split's shards as its object store lists them; each must equal the
    manifest's (a download is checked against it, and the windows are sized by it)."""
    fs, inner = filesystem.filesystem(folder)
    listed = {posixpath.basename(info["name"].rstrip("/")): int(info["size"])
              for info in fs.ls(inner, detail=True) if info.get("type") != "directory"}
    for name, size in zip(names, declared):
        if name not in listed:
            raise ShardCacheError(f"shard {filesystem.join(folder, name)} named in the manifest is missing")
        if listed[name] != size:
            raise ManifestMismatch(f"shard {name!r}: the manifest says {size:,} bytes, the store holds "
                                   f"{listed[name]:,}")
    return declared
