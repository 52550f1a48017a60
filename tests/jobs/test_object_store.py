"""The real job on an S3-compatible object store: moto's server over HTTP on localhost (started here,
no network), Beam's S3 filesystem (`apache-beam[aws]`, `--s3_endpoint_url`) for the job and s3fs
for the consumers. Inputs and outputs on `s3://`, both masking modes, threads and worker processes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.consumers.outputs import manifest_with_inputs
from schemas import manifest as m
from tests.conftest import REPO, SMALL_BOOKS, TOKENIZER_DIR, run_preprocess

pytestmark = pytest.mark.slow
BUCKET = "maskbeam-test"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3(small_books, moto_endpoint):
    boto3 = pytest.importorskip("boto3")
    endpoint = moto_endpoint
    patch = pytest.MonkeyPatch()
    for key, value in {**KEYS, "AWS_ENDPOINT_URL": endpoint}.items():  # s3fs and boto3 read these
        patch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for book in sorted(small_books.iterdir()):
        client.upload_file(str(book), BUCKET, f"books/{book.name}")
    yield endpoint, client
    patch.undo()


def _flags(endpoint: str) -> list[str]:
    return ["--s3_endpoint_url", endpoint, "--s3_access_key_id", KEYS["AWS_ACCESS_KEY_ID"],
            "--s3_secret_access_key", KEYS["AWS_SECRET_ACCESS_KEY"], "--s3_region_name", KEYS["AWS_DEFAULT_REGION"]]


def _objects(client, prefix: str) -> dict[str, bytes]:
    """Every object below `prefix`, by its key relative to the prefix."""
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
            for o in page.get("Contents", [])]
    return {key[len(prefix) + 1:]: client.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}


def _local_files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# The dynamic mode's local run is the `windowed` fixture's output (the same options): one run less.
MODES = {"static-threads": ["--num_shards", "2", "--split_bytes", "65536"],  # books over 64 KB: tokenized in ranges
         "dynamic-processes": ["--masking", "dynamic", "--tokenizer_backend", "hf", "--num_shards", "6"]}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_s3_in_s3_out_equals_the_local_run(s3, small_books, tmp_path, mode, request):
    import datasets

    from jobs.validate import run as validate

    endpoint, client = s3
    if mode.startswith("dynamic"):
        local = request.getfixturevalue("windowed")[0]
    else:
        local = tmp_path / "local"
        run_preprocess([small_books], local, *MODES[mode], "--validation_fraction", "0.1")
    out = f"s3://{BUCKET}/out-{mode}"
    args = (*MODES[mode], "--validation_fraction", "0.1", *_flags(endpoint))
    if mode.startswith("dynamic"):  # killed part-way on S3, then --resume: the same bytes as one clean run
        _kill_after_first_input(client, [f"s3://{BUCKET}/books"], out, args)
        run_preprocess([f"s3://{BUCKET}/books"], out, *args, "--resume")
    else:
        run_preprocess([f"s3://{BUCKET}/books"], out, *args)
    remote, here = _objects(client, f"out-{mode}"), _local_files(local)
    assert not [key for key in remote if key.startswith(m.TEMP_DIR)], "the temporary folder stayed behind"
    assert sorted(remote) == sorted(here)
    for key in here:
        if key not in (m.MANIFEST_FILE, m.INPUTS_FILE):  # they name the inputs by their paths
            assert hashlib.sha256(remote[key]).hexdigest() == hashlib.sha256(here[key]).hexdigest(), key
    a, b = manifest_with_inputs(out), manifest_with_inputs(str(local))  # INPUTS_FILE read from S3 and checked
    assert a[m.KEY_SPLITS] == b[m.KEY_SPLITS] and a[m.KEY_COUNTS] == b[m.KEY_COUNTS]
    assert [e[m.KEY_PATH].rsplit("/", 1)[1] for e in a[m.KEY_INPUTS]] == \
        [e[m.KEY_PATH].rsplit("/", 1)[1] for e in b[m.KEY_INPUTS]]
    assert all(e[m.KEY_PATH].startswith(f"s3://{BUCKET}/books/") for e in a[m.KEY_INPUTS])
    assert validate([out]) == 0
    remote_dd = datasets.load_from_disk(out, storage_options={"client_kwargs": {"endpoint_url": endpoint}})
    local_dd = datasets.load_from_disk(str(local))
    for split in m.SPLITS:
        assert remote_dd[split].num_rows == local_dd[split].num_rows
        assert remote_dd[split][:]["input_ids"] == local_dd[split][:]["input_ids"]
    if mode.startswith("static"):
        _publish_from_s3_with_bounded_disk(out, local, tmp_path)
    else:
        _train_from_s3_through_the_shard_cache(out, local, tmp_path)


def test_near_duplicates_on_s3_equal_the_local_run(s3, small_books, tmp_path):
    """The books, a near copy of one (a word changed in its body) and an exact copy of that, on S3
    with --dedup --near_dedup 0.8 and books over 64 KB read in byte ranges: the band files, the
    candidate pairs' chunks (read a block at a time by ranged reads), the report runs, the edges and
    the roots' table all in the object store's temp folder; the same bytes as the local run."""
    import shutil

    endpoint, client = s3
    folder = tmp_path / "in"
    shutil.copytree(small_books, folder)
    book = next(name for name in SMALL_BOOKS  # a book, not the HTML page
                if not (folder / name).read_text(encoding="utf-8").lstrip().startswith("<"))
    text = (folder / book).read_text(encoding="utf-8")
    at = text.index(" the ", len(text) // 2)
    (folder / "zz_near.txt").write_text(text[:at] + " a " + text[at + 5:], encoding="utf-8")
    shutil.copy(folder / "zz_near.txt", folder / "zz_near_copy.txt")
    for path in sorted(folder.iterdir()):
        client.upload_file(str(path), BUCKET, f"near-books/{path.name}")
    flags = ("--dedup", "--near_dedup", "0.8", "--num_shards", "2", "--split_bytes", "65536")
    local = tmp_path / "local"
    run_preprocess([folder], local, *flags)
    out = f"s3://{BUCKET}/out-near"
    run_preprocess([f"s3://{BUCKET}/near-books"], out, *flags, *_flags(endpoint))
    remote, here = _objects(client, "out-near"), _local_files(local)
    assert sorted(remote) == sorted(here)
    for key in here:
        if key not in (m.MANIFEST_FILE, m.INPUTS_FILE):  # they name the inputs by their paths
            assert remote[key] == here[key], key
    a, b = manifest_with_inputs(out), manifest_with_inputs(str(local))
    assert a[m.KEY_COUNTS] == b[m.KEY_COUNTS]
    skipped = a[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON]
    assert skipped.get("duplicate") == 1 and skipped.get("near duplicate") == 1, skipped

    def near(manifest):
        return [(e[m.KEY_NEAR_DUPLICATE_OF].rsplit("/", 1)[1], e[m.KEY_PATH].rsplit("/", 1)[1], e[m.KEY_SIMILARITY])
                for e in manifest[m.KEY_NEAR_DUPLICATES]]

    pairs = [p[:2] for p in near(a)]
    assert near(a) == near(b) and (book, "zz_near.txt") in pairs
    assert (book, "zz_near_copy.txt") not in pairs  # dropped by --dedup: its pairs are not scored


def _train_from_s3_through_the_shard_cache(out: str, local, tmp_path) -> None:
    """The loader on an s3:// output: verified local copies (content-addressed, reused), the same
    masked rows as the local output, a limit that cannot hold the split refused, and jobs.train runs."""
    from jobs.train import run as train
    from pipeline.consumers.loading import MlmShardDataset
    from pipeline.storage.shard_cache import ShardCacheError

    cache = tmp_path / "cache"
    remote = MlmShardDataset(out, m.TRAIN, epoch=1, cache_dir=str(cache))
    here = MlmShardDataset(str(local), m.TRAIN, epoch=1)
    rows = list(range(len(here)))
    for key, value in here.__getitems__(rows).items():
        assert (remote.__getitems__(rows)[key] == value).all(), key
    copies = sorted(cache.glob("*/*.arrow"))
    manifest = json.loads((local / m.MANIFEST_FILE).read_text())
    assert [p.stem for p in copies] == sorted(s[m.KEY_SHA256] for s in manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS])
    inodes = [p.stat().st_ino for p in copies]
    MlmShardDataset(out, m.TRAIN, cache_dir=str(cache))  # cached: nothing downloaded again
    assert [p.stat().st_ino for p in copies] == inodes
    with pytest.raises(ShardCacheError, match="cache limit"):
        MlmShardDataset(out, m.TRAIN, cache_dir=str(tmp_path / "small"), cache_limit=1000)
    final = train(["--data", out, "--output", str(tmp_path / "model"), "--config", "tiny", "--max_steps", "2",
                   "--batch_size", "4", "--eval_rows", "4", "--cache_dir", str(cache)])
    assert final["eval_targets"] > 0


def _kill_after_first_input(client, inputs: list[str], out: str, args) -> None:
    prefix = out.split(f"s3://{BUCKET}/", 1)[1]
    argv = [sys.executable, "-m", "jobs.preprocess", *[a for i in inputs for a in ("--input", i)], "--output", out,
            "--tokenizer", str(TOKENIZER_DIR), *args]
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not [
            k for k in _objects(client, prefix) if k.startswith(m.TEMP_DIR) and k.endswith("-result.json")]:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its worker processes, at once
    proc.wait()
    assert m.MANIFEST_FILE not in _objects(client, prefix)


def _publish_from_s3_with_bounded_disk(out: str, local, tmp_path) -> None:
    """jobs.publish from the s3:// output: the dry run equals the local output's; the upload makes
    one data file at a time in its scratch folder (mocked Hub: it cannot be reached here)."""
    from unittest import mock

    from huggingface_hub import HfApi

    from pipeline.consumers.publish import build_upload_folder, publish_streaming

    dry = build_upload_folder(out, str(tmp_path / "dry"), repo_id="someone/books", fmt="both")
    here = build_upload_folder(str(local), str(tmp_path / "here"), repo_id="someone/books", fmt="both")
    assert dry.files == here.files
    for name in dry.files:
        if name.endswith((".parquet", ".arrow")):
            assert (dry.path / name).read_bytes() == (here.path / name).read_bytes(), name
    scratch, uploaded, most = tmp_path / "scratch", {}, []
    scratch.mkdir()

    def preupload(repo_id, *, additions, repo_type, token):
        for op in additions:
            most.append(sum(1 for p in scratch.rglob("*") if p.is_file()))
            uploaded[op.path_in_repo] = open(op.path_or_fileobj, "rb").read()
            op._upload_mode = "lfs"  # what the Hub answers for .parquet/.arrow in a dataset repo

    api = mock.create_autospec(HfApi, instance=True)
    api.preupload_lfs_files.side_effect = preupload
    publish_streaming(out, "someone/books", fmt="both", token="hf_x", api=api, scratch=str(scratch))
    assert max(most) == 1  # bounded: one data file on local disk at a time
    assert uploaded == {n: (dry.path / n).read_bytes() for n in dry.files  # the data files and INPUTS_FILE
                        if n.endswith((".parquet", ".arrow")) or n == m.INPUTS_FILE}
    assert (dry.path / m.INPUTS_FILE).read_bytes() == (here.path / m.INPUTS_FILE).read_bytes()  # no s3:// path left
    committed = {op.path_in_repo for op in api.create_commit.call_args.kwargs["operations"]}
    assert committed == set(dry.files)
    assert not [p for p in scratch.rglob("*") if p.is_file()]


def test_s3_output_prefix_is_refused_then_overwritten_and_resumed(s3, small_books, capsys):
    endpoint, client = s3
    prefix = "out-overwrite"
    book = f"s3://{BUCKET}/books/{SMALL_BOOKS[0]}"  # one book: each S3 run costs seconds of client set-up
    out = f"s3://{BUCKET}/{prefix}"
    args = ("--num_shards", "2", *_flags(endpoint))
    run_preprocess([book], out, *args)
    first = _objects(client, prefix)
    with pytest.raises(SystemExit):
        run_preprocess([book], out, *args)
    assert "exists and is not empty" in capsys.readouterr().err
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{m.TRAIN}/data-99999-of-99999.arrow", Body=b"stale")
    run_preprocess([book], out, *args, "--overwrite")
    assert _objects(client, prefix) == first  # the stale shard is gone, the rest rewritten identically
    # a damaged shard on S3: --resume rebuilds exactly what does not check out
    key = f"{prefix}/{m.TRAIN}/data-00000-of-00002.arrow"
    client.put_object(Bucket=BUCKET, Key=key, Body=first[key.split("/", 1)[1]][:100])
    run_preprocess([book], out, *args, "--resume")
    assert _objects(client, prefix) == first
    # a prefix holding something else is never deleted, even with --overwrite
    client.put_object(Bucket=BUCKET, Key="precious/data.txt", Body=b"keep me")
    with pytest.raises(SystemExit):
        run_preprocess([book], f"s3://{BUCKET}/precious", *args, "--overwrite")
    assert "not a MaskBeam output" in capsys.readouterr().err
    assert _objects(client, "precious") == {"data.txt": b"keep me"}


def test_unreachable_s3_input_names_the_pattern(s3, tmp_path, capsys):
    endpoint, _ = s3
    with pytest.raises(SystemExit):
        run_preprocess([f"s3://{BUCKET}/no-such-books/*.txt"], tmp_path / "out", *_flags(endpoint))
    err = capsys.readouterr().err
    assert f"s3://{BUCKET}/no-such-books/*.txt" in err
    assert not os.path.exists(tmp_path / "out")


@pytest.fixture(scope="module")
def windowed(s3, small_books, tmp_path_factory):
    """A dynamic output of 6 train shards, locally and on S3, and a cache limit of about half its
    train split (at least three shards). Made with the dynamic mode's options of
    test_s3_in_s3_out_equals_the_local_run, whose local run it is."""
    endpoint, client = s3
    local = tmp_path_factory.mktemp("windowed") / "local"
    run_preprocess([small_books], local, *MODES["dynamic-processes"], "--validation_fraction", "0.1")
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"windowed/{path.relative_to(local).as_posix()}")
    shards = json.loads((local / m.MANIFEST_FILE).read_text())[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS]
    total, largest = sum(s[m.KEY_BYTES] for s in shards), max(s[m.KEY_BYTES] for s in shards)
    limit = max(total // 2, 3 * largest)
    assert limit < total
    return local, f"s3://{BUCKET}/windowed", len(shards), limit


def _split_bytes(local, split: str) -> int:
    return sum(s[m.KEY_BYTES] for s in json.loads((local / m.MANIFEST_FILE).read_text())[m.KEY_SPLITS][split][m.KEY_SHARDS])


def _cache_watcher(cache, *, every: float = 0.005):
    """Polls the cache folder in a thread: the peak bytes it held, and whether `watched` paths were
    ever missing. Returns (peak, missing, stop)."""
    import threading

    peak, missing, watched, done = [0], [], [], threading.Event()

    def size(path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:  # evicted between the listing and the stat: the watcher must not die
            return 0

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(size(p) for p in cache.glob("*/*.arrow")))
            missing.extend(p for p in watched if not os.path.exists(p))
            time.sleep(every)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join()

    return peak, missing, watched, stop


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_cache_smaller_than_the_split_reads_window_by_window(windowed, tmp_path, workers):
    """A dynamic output on S3 read through a cache of about half the split: the sampler shuffles
    shards, then rows within windows of shards, and prefetches the next window; two epochs through
    ResumableLoader (0 workers, and 2 persistent workers) give the batches of the local output read
    in the same order, the cache never holds more than its limit, and evicted shards come back."""
    import torch

    from jobs.train import run as train
    from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableLoader, ResumableSampler

    local, url, n_shards, limit = windowed
    cache = tmp_path / "cache"
    remote = MlmShardDataset(url, m.TRAIN, cache_dir=str(cache), cache_limit=limit)
    here = MlmShardDataset(str(local), m.TRAIN)
    options = remote.sampler_options()
    assert 1 <= options["window_shards"] < n_shards and not list(cache.glob("*/*.arrow"))  # nothing yet
    peak, _, _, stop = _cache_watcher(cache)

    def batches(dataset, sampler_options):
        sampler = ResumableSampler(len(dataset), seed=3, tag_epoch=True, **sampler_options)
        # the loader prefetches 2 x 2 x 4 = 16 rows, fewer than a window (one ~30-row shard) holds
        loader = ResumableLoader(dataset, sampler=sampler, batch_size=4, collate_fn=MlmCollator(),
                                 num_workers=workers, persistent_workers=workers > 0, prefetch_factor=2 if workers else None)
        out = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            out += [{k: v.clone() for k, v in batch.items()} for batch in loader]
        return out

    try:
        got = batches(remote, options)
    finally:
        stop()
        remote.windows.close()
    want = batches(here, {k: options[k] for k in ("shard_rows", "window_shards")})
    assert len(got) == len(want) > 2
    for a, b in zip(got, want):
        assert all(torch.equal(a[k], b[k]) for k in b)
    assert 0 < peak[0] <= limit, (peak[0], limit)
    assert remote.windows.downloads > n_shards  # evicted shards were fetched again in epoch 2
    if workers:  # jobs.train on the windowed cache (the validation split kept besides), with DataLoader workers
        final = train(["--data", url, "--output", str(tmp_path / "model"), "--config", "tiny",
                       "--max_steps", "3", "--batch_size", "4", "--eval_rows", "4", "--num_workers", str(workers),
                       "--cache_dir", str(tmp_path / "train-cache"),
                       "--cache_limit", str(limit + _split_bytes(local, m.VALIDATION))])
        assert final["eval_targets"] > 0


def test_an_evicted_copy_is_fetched_again_and_the_validation_split_stays_cached(windowed, tmp_path):
    """Two datasets on one cache (what jobs.train does): a copy deleted behind a dataset's back (by
    another dataset's windows, another process, a user) is downloaded again when a fresh DataLoader
    worker opens it (not a FileNotFoundError); and a train split read window by window
    never evicts the validation copies it was told to keep, whose bytes count in the limit."""
    from torch.utils.data import DataLoader

    from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableLoader, ResumableSampler
    from pipeline.storage.shard_cache import ShardCacheError

    local, url, _, limit = windowed
    cache = tmp_path / "cache"
    here = MlmShardDataset(str(local), m.VALIDATION)
    want = here.__getitems__(list(range(len(here))))

    def first_rows(dataset) -> dict:
        loader = DataLoader(dataset, batch_size=len(here), num_workers=2, collate_fn=lambda batch: batch)
        return next(iter(loader))

    val = MlmShardDataset(url, m.VALIDATION, cache_dir=str(cache))
    copies = [path for path in val.paths if os.path.exists(path)]
    assert copies and all(p.startswith(str(cache)) for p in copies)
    for path in copies:
        os.remove(path)  # gone behind its back
    got = first_rows(val)
    for key, value in want.items():
        assert (got[key] == value).all(), key
    assert all(os.path.exists(p) for p in copies)  # downloaded again by a worker

    val_bytes = sum(os.path.getsize(p) for p in copies)
    assert val_bytes == _split_bytes(local, m.VALIDATION)
    largest = max(s[m.KEY_BYTES] for s in json.loads((local / m.MANIFEST_FILE).read_text())[m.KEY_SPLITS][m.TRAIN][
        m.KEY_SHARDS])
    with pytest.raises(ShardCacheError, match="less the .* MB of kept copies of another split"):
        MlmShardDataset(url, m.TRAIN, cache_dir=str(cache), cache_limit=3 * largest + val_bytes - 1,
                        keep_cached=val.paths)
    train = MlmShardDataset(url, m.TRAIN, cache_dir=str(cache), cache_limit=limit + val_bytes, keep_cached=val.paths)
    assert train.window_shards >= 1  # the validation copies leave the train split what it had alone
    peak, missing, watched, stop = _cache_watcher(cache)
    watched.extend(copies)
    sampler = ResumableSampler(len(train), seed=3, tag_epoch=True, **train.sampler_options())
    loader = ResumableLoader(train, sampler=sampler, batch_size=4, collate_fn=MlmCollator())
    try:
        for epoch in range(2):
            sampler.set_epoch(epoch)
            assert sum(1 for _ in loader) == len(train) // 4 + (len(train) % 4 > 0)
    finally:
        stop()
        train.windows.close()
    assert not missing, f"validation copies evicted: {sorted(set(missing))}"
    assert 0 < peak[0] <= limit + val_bytes, (peak[0], limit + val_bytes)
    assert train.windows.downloads > len(train.paths)
