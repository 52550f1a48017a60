"""The local cache of remote shards: verified, content-addressed, bounded by evicting the least
recently used copies of other shards. Sources here are `file://` URLs read through fsspec, the same
code path as `s3://` (which tests/jobs/test_object_store.py drives against moto)."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.storage.shard_cache import ShardCacheError, cached_shards


def _shard(tmp_path, name: str, size: int) -> tuple[str, str, int]:
    data = (name.encode() * size)[:size]
    path = tmp_path / "remote" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return f"file://{path}", hashlib.sha256(data).hexdigest(), size


def test_copies_are_verified_reused_and_evicted_least_recently_used_first(tmp_path):
    cache = str(tmp_path / "cache")
    a, b, c = (_shard(tmp_path, n, 1000) for n in "abc")
    (first,) = cached_shards([a], cache, limit=2500)
    (second,) = cached_shards([b], cache, limit=2500)
    assert cached_shards([a], cache, limit=2500) == [first]  # reused, and now the most recently used
    cached_shards([c], cache, limit=2500)  # room for two: b, the least recently used, goes
    kept = sorted(p.name for p in (tmp_path / "cache").rglob("*.arrow"))
    assert kept == sorted(f"{sha}.arrow" for _, sha, _ in (a, c))
    with pytest.raises(ShardCacheError, match="cache limit"):
        cached_shards([a, b, c], cache, limit=2500)  # a split that cannot fit is refused


def test_a_shard_that_does_not_match_the_manifest_is_refused(tmp_path):
    url, sha, size = _shard(tmp_path, "x", 500)
    with pytest.raises(ShardCacheError, match="do not match the manifest"):
        cached_shards([(url, "0" * 64, size)], str(tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("*.arrow*"))  # no copy, no partial file left
    assert cached_shards([(url, sha, size)], str(tmp_path / "cache"))
