"""The local cache of remote shards: verified, content-addressed, bounded by evicting the least
recently used copies of other shards. Sources here are `file://` URLs read through fsspec, the same
code path as `s3://` (which tests/jobs/test_object_store.py drives against moto)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.storage.shard_cache import ShardCache, ShardCacheError, cached_shards
from tests.conftest import REPO


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


FETCH_AND_CHECK = """
import hashlib, sys
from pipeline.storage.shard_cache import ShardCache
url, sha, size, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cache = ShardCache(folder)
path = cache.fetch(url, sha, size)
with open(path, "rb") as handle:
    print(cache.downloads, hashlib.sha256(handle.read()).hexdigest() == sha)
"""


def _overwrite_ids(path: str, keep_mtime: bool) -> None:
    """8 ids (32 bytes) overwritten in place: same size; with `keep_mtime`, the same mtime too."""
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(200)
        handle.write(b"\xff" * 32)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_copy_changed_in_place_is_never_read(tmp_path):
    """A verified copy with 8 ids overwritten (size unchanged) was read by the next dataset with no
    error: the cache trusted it by name and size. The next process hashes the copy before its first
    use and downloads it again; this process notices the change by the copy's mtime."""
    cache = str(tmp_path / "cache")
    url, sha, size = _shard(tmp_path, "s", 4000)
    (path,) = cached_shards([(url, sha, size)], cache)
    _overwrite_ids(path, keep_mtime=True)  # a forger restores the mtime: the next process hashes anyway
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", FETCH_AND_CHECK, url, sha, str(size), cache], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "True"], out.stderr[-2000:]  # downloaded again, the right bytes
    assert "downloading it again" in out.stderr
    _overwrite_ids(path, keep_mtime=False)
    fresh = ShardCache(cache)
    assert fresh.fetch(url, sha, size) == path and fresh.downloads == 1
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == sha
    again = ShardCache(cache)
    assert again.fetch(url, sha, size) == path and again.downloads == 0  # a good copy is reused


# -- names from the manifest stay inside the cache (issue 26.8) ------------------------------------


@pytest.mark.parametrize("sha", ["../../victim/planted", "/etc/passwd", "AB" * 32, "a" * 63, "a" * 64 + "\n", 12])
def test_a_sha256_that_is_not_64_hex_digits_never_names_a_file(tmp_path, sha):
    """The manifest's sha256 names the cached copy: `../../victim/planted` made the loader read (and
    another entry write) a file outside the cache."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "planted.arrow").write_bytes(b"planted")
    url, _, size = _shard(tmp_path, "x", 7)
    cache = tmp_path / "cache" / "a" / "b"  # CACHE/../../../victim/planted.arrow is tmp_path/victim/planted.arrow
    cache.mkdir(parents=True)
    with pytest.raises(ShardCacheError, match="64 lowercase hex digits"):
        cached_shards([(url, sha, size)], str(cache))
    with pytest.raises(ShardCacheError, match="64 lowercase hex digits"):
        ShardCache(str(cache)).fetch(url, sha, 7)
    assert (victim / "planted.arrow").read_bytes() == b"planted"
    assert {p.name for p in tmp_path.iterdir()} <= {"cache", "remote", "victim"}  # nothing made outside
    assert [p.name for p in victim.iterdir()] == ["planted.arrow"]


def test_a_cache_sub_folder_linked_out_of_the_cache_is_refused(tmp_path):
    url, sha, size = _shard(tmp_path, "x", 100)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / sha[:2]).symlink_to(outside)
    with pytest.raises(ShardCacheError, match="outside the cache"):
        ShardCache(str(tmp_path / "cache")).fetch(url, sha, size)
    assert not list(outside.iterdir())


# -- partial files, shutdown, processes sharing a cache (issue 23.11) ------------------------------


@pytest.fixture(scope="module")
def broken_server():
    """A local HTTP server (fsspec's http filesystem reads it) whose bodies fail part-way, as a
    network does: `/cut` sends 100 of 3,000 bytes and closes; `/stall` sends 100 and waits."""
    pytest.importorskip("aiohttp")
    import http.server
    import threading

    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Length", "3000")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            self.do_HEAD()
            self.wfile.write(b"x" * 100)
            self.wfile.flush()
            if "stall" in self.path:
                release.wait(60)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()


def _killed_download(url: str, cache: str) -> None:
    """A process killed while downloading (its source stalls part-way; it is SIGKILLed)."""
    code = ("from pipeline.storage.shard_cache import ShardCache; "
            f"ShardCache({cache!r}, limit=10**9).fetch({url!r}, 'f' * 64, 3000)")
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not list(Path(cache).glob("*/*.partial-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # into the stalled read
    child.kill()
    child.wait()


def test_partial_files_of_killed_downloads_are_counted_then_removed(tmp_path, broken_server):
    """A killed or failed download's `.partial-PID-TID` file is counted in the limit, then removed: left
    for ever, uncounted, it would grow the cache past its limit."""
    cache = str(tmp_path / "cache")
    _killed_download(f"{broken_server}/stall", cache)
    (left,) = Path(cache).glob("*/*.partial-*")
    assert left.stat().st_size == 3000  # reserved at its full size while it ran
    a = _shard(tmp_path, "a", 1000)
    shards = ShardCache(cache, limit=2500)
    shards.fetch(*a)
    assert not left.exists() and shards.partials_removed == 1
    assert shards.used_bytes() == 1000


def test_a_failed_download_removes_its_partial_file(tmp_path, broken_server):
    """A read that fails part-way (the connection cut after 100 of 3,000 bytes) leaves no partial
    file."""
    url, sha, size = _shard(tmp_path, "x", 500)
    cache = ShardCache(str(tmp_path / "cache"))
    with pytest.raises(Exception, match="Not enough data"):
        cache.fetch(f"{broken_server}/cut", sha, 3000)
    with pytest.raises(ShardCacheError, match="do not match the manifest"):
        cache.fetch(url, sha, size + 1)  # the file is shorter than the manifest says
    with pytest.raises(FileNotFoundError):
        cache.fetch(url + ".gone", sha, size)
    assert cache.partials_removed == 3 and cache.downloads == 3
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".partial-" in p.name]


def test_closing_drops_queued_downloads_and_exit_does_not_wait_for_them(tmp_path, broken_server):
    """Interpreter exit does not wait for the queued downloads of a prefetcher that was never closed."""
    shards = [_shard(tmp_path, f"s{i}", 200_000) for i in range(40)]
    cache = ShardCache(str(tmp_path / "cache"), parallel=1)
    landed = []
    for shard in shards:
        cache.prefetch(*shard, done=lambda path, error: landed.append((path, error)))
    cache.close()
    assert len(landed) < len(shards) and all(error is None for _, error in landed)
    with pytest.raises(ShardCacheError, match="closed"):
        cache.prefetch(*shards[0], done=lambda path, error: None)
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".partial-" in p.name]
    # a process that exits with downloads queued behind one that stalls
    stall = f"{broken_server}/stall"
    code = ("from pipeline.storage.shard_cache import ShardCache\n"
            f"cache = ShardCache({str(tmp_path / 'cache2')!r}, parallel=1)\n"
            f"cache.prefetch({stall!r}, 'e' * 64, 3000, done=lambda p, e: None)\n"
            f"for i in range(20):\n"
            f"    cache.prefetch({stall!r}, f'{{i:064x}}', 3000, done=lambda p, e: None)\n")
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=True)
    assert time.monotonic() - started < 15


def _fetch_in_process(cache: str, shard: tuple, barrier, results) -> None:
    barrier.wait()
    shards = ShardCache(cache)
    path = shards.fetch(*shard)
    results.put((shards.downloads, hashlib.sha256(Path(path).read_bytes()).hexdigest()))


def test_processes_sharing_a_cache_download_a_shard_once(tmp_path):
    """Ranks of a node and DataLoader workers share one folder: a process that wants a shard another
    is downloading waits for it (a file lock per shard) instead of downloading it again."""
    import multiprocessing

    shard = _shard(tmp_path, "big", 8_000_000)
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_fetch_in_process, args=(str(tmp_path / "cache"), shard, barrier, results))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join()
    assert sorted(downloads for downloads, _ in got) == [0, 0, 1]
    assert {digest for _, digest in got} == {shard[1]}


def test_eviction_skips_copies_another_reader_keeps(tmp_path):
    """Two caches on one folder (as two ranks of a node): the one that makes room never evicts the
    copies the other pins (its current windows), even when they are the least recently used."""
    a, b, c = (_shard(tmp_path, n, 1000) for n in "abc")
    folder = str(tmp_path / "cache")
    rank0, rank1 = ShardCache(folder, limit=2500), ShardCache(folder, limit=2500)
    kept = rank0.fetch(*a)
    rank1.fetch(*b)
    os.utime(kept, (1, 1))  # a is the least recently used
    rank0.pin([kept])
    rank1.fetch(*c)  # room for two: b goes, not the pinned a
    assert os.path.exists(kept) and not os.path.exists(rank1.path(b[1]))
    rank0.pin([])
    rank1.fetch(*b)  # unpinned, a may go now
    assert not os.path.exists(kept)
