"""The PyTorch loader over real preprocess output."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeline.consumers.inspection import read_split_rows
from pipeline.consumers.loading import MlmCollator, MlmShardDataset, ResumableSampler
from pipeline.consumers.outputs import BadManifest, load_manifest, masking_rule
from pipeline.storage.shard_cache import ShardCacheError
from pipeline.storage.shard_rows import READ_MODES
from schemas import manifest as m
from schemas.shard import IGNORE_INDEX
from tests.conftest import run_preprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outputs(small_books, tmp_path_factory):
    base = tmp_path_factory.mktemp("loader")
    run_preprocess([small_books], base / "static", "--num_shards", "3", "--validation_fraction", "0.1")
    run_preprocess([small_books], base / "dynamic", "--num_shards", "3", "--validation_fraction", "0.1",
                   "--masking", "dynamic")
    return base


@pytest.mark.parametrize("read_mode", READ_MODES)
def test_dynamic_masks_repeat_per_epoch_and_change_between_epochs(outputs, read_mode):
    ds = MlmShardDataset(str(outputs / "dynamic"), read_mode=read_mode)
    rule = masking_rule(load_manifest(str(outputs / "dynamic")))
    expected = read_split_rows(str(outputs / "dynamic"), m.TRAIN, load_manifest(str(outputs / "dynamic")), rule, 2)
    ds.set_epoch(2)
    idx = list(range(len(ds)))
    batch = ds.__getitems__(idx)
    np.testing.assert_array_equal(batch["input_ids"], expected.ids)
    np.testing.assert_array_equal(batch["labels"], expected.labels)
    again = ds.__getitems__(idx[::-1])
    np.testing.assert_array_equal(again["labels"], expected.labels[::-1])
    ds.set_epoch(3)
    other = ds.__getitems__(idx)
    assert (other["labels"] != batch["labels"]).any(axis=1).mean() > 0.99
    single = ds[5]
    np.testing.assert_array_equal(single["labels"], other["labels"][5])


@pytest.mark.parametrize("read_mode", READ_MODES)
def test_static_rows_are_returned_as_stored(outputs, read_mode):
    import datasets

    ds = MlmShardDataset(str(outputs / "static"), read_mode=read_mode)
    hf = datasets.load_from_disk(str(outputs / "static"))[m.TRAIN].with_format("numpy")
    picked = np.random.default_rng(0).permutation(len(ds))[:64].tolist() + [0, len(ds) - 1]
    batch = ds.__getitems__(picked)
    rows = hf[picked]
    for key in ("input_ids", "attention_mask", "labels"):
        np.testing.assert_array_equal(batch[key], rows[key])


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
@pytest.mark.parametrize("read_mode", READ_MODES)
def test_pread_reads_rows_without_mapping_the_shards(outputs, read_mode):
    """What bounds a DataLoader worker's RSS: with pread no page of a shard is ever mapped into the
    process (the rows come through the page cache by system call); with mmap they are."""
    ds = MlmShardDataset(str(outputs / "static"), read_mode=read_mode)
    batch = ds.__getitems__(list(range(len(ds))))
    assert batch["input_ids"].shape == (len(ds), 512)
    with open("/proc/self/maps") as handle:
        mapped = {line.split(maxsplit=5)[-1].strip() for line in handle if line.count(" ") >= 5}
    shards = {os.path.realpath(path) for path in ds.paths}
    assert (shards & {os.path.realpath(p) for p in mapped if p.startswith("/")}) == (
        set() if read_mode == "pread" else shards)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd (Linux)")
@pytest.mark.parametrize("read_mode", READ_MODES)
def test_open_shard_files_are_bounded_and_reopened_on_use(outputs, read_mode, monkeypatch):
    """An output of thousands of shards must not hold a file open per shard in every worker (the
    usual limit is 1,024): past MAX_OPEN_SHARDS the least recently used are closed and reopened."""
    from pipeline.consumers.loading import open_shards

    monkeypatch.setattr(open_shards, "MAX_OPEN_SHARDS", 2)
    ds = MlmShardDataset(str(outputs / "static"), read_mode=read_mode)
    assert len(ds.paths) == 3
    shards = {os.path.realpath(path) for path in ds.paths}

    def open_shard_files() -> int:
        return sum(os.path.realpath(os.path.join("/proc/self/fd", fd)) in shards for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(os.path.join("/proc/self/fd", fd)))

    expected = ds.__getitems__(list(range(len(ds))))  # opens all three in turn
    assert open_shard_files() <= 2
    rng = np.random.default_rng(3)
    for _ in range(6):  # every shard in turn, in random order, many times over
        picked = rng.permutation(len(ds))[:50]
        batch = ds.__getitems__(picked.tolist())
        for key in expected:
            np.testing.assert_array_equal(batch[key], expected[key][picked])
        assert open_shard_files() <= 2


@pytest.mark.parametrize("read_mode", READ_MODES)
def test_dataset_pickles_without_data_and_workers_agree(outputs, read_mode):
    ds = MlmShardDataset(str(outputs / "dynamic"), epoch=1, read_mode=read_mode)
    ds.__getitems__([0])
    blob = pickle.dumps(ds)
    assert len(blob) < 200_000  # paths and the rule travel, not the rows
    collate = MlmCollator()
    in_process = [collate(ds.__getitems__(list(range(i, min(i + 8, len(ds)))))) for i in range(0, len(ds), 8)]
    loader = DataLoader(ds, batch_size=8, shuffle=False, num_workers=2, collate_fn=collate)
    for ours, theirs in zip(in_process, loader):
        for key in ours:
            assert torch.equal(ours[key], theirs[key])


def test_collator_types_trimming_and_hf_rows(outputs):
    ds = MlmShardDataset(str(outputs / "dynamic"))
    batch = MlmCollator(trim_padding=True)(ds.__getitems__([len(ds) - 1]))
    assert all(t.dtype == torch.int64 for t in batch.values())
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] <= 512
    import datasets

    rows = datasets.load_from_disk(str(outputs / "dynamic"))[m.TRAIN]
    collator = MlmCollator.for_output(str(outputs / "dynamic"), epoch=0)
    hf_batch = collator([rows[i] for i in range(4)])
    expected = ds.__getitems__([0, 1, 2, 3])
    np.testing.assert_array_equal(hf_batch["labels"].numpy(), expected["labels"])
    with pytest.raises(ValueError, match="mask_seed"):
        MlmCollator()([rows[0]])
    assert (hf_batch["labels"] != IGNORE_INDEX).sum() > 0


def test_sampler_is_disjoint_deterministic_and_resumable():
    n = 103
    ranks = [ResumableSampler(n, seed=7, rank=r, world_size=4) for r in range(4)]
    for s in ranks:
        s.set_epoch(3)
    orders = [list(s) for s in ranks]
    assert all(len(o) == 26 for o in orders)
    assert set().union(*orders) == set(range(n))
    assert len(set(orders[0]) & set(orders[1])) == 0
    again = ResumableSampler(n, seed=7, rank=2, world_size=4)
    again.set_epoch(3)
    assert list(again) == orders[2]
    again.set_epoch(4)
    assert list(again) != orders[2]
    resumed = ResumableSampler(n, seed=7, rank=2, world_size=4)
    resumed.load_state_dict({"epoch": 3, "position": 10, "seed": 7, "world_size": 4})
    assert list(resumed) == orders[2][10:]
    with pytest.raises(ValueError, match="seed"):
        resumed.load_state_dict({"epoch": 0, "position": 0, "seed": 8, "world_size": 4})


def test_epoch_tagged_indices_reach_persistent_workers(outputs):
    ds = MlmShardDataset(str(outputs / "dynamic"))
    sampler = ResumableSampler(len(ds), seed=1, tag_epoch=True, shuffle=False)
    loader = DataLoader(ds, batch_size=len(ds), sampler=sampler, num_workers=1, persistent_workers=True,
                        collate_fn=MlmCollator())
    per_epoch = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        per_epoch.append(next(iter(loader))["labels"])
    for epoch in range(2):
        ds.set_epoch(epoch)
        expected = ds.__getitems__(list(range(len(ds))))["labels"]
        np.testing.assert_array_equal(per_epoch[epoch].numpy(), expected)
    assert not torch.equal(per_epoch[0], per_epoch[1])


def test_static_output_over_several_epochs_repeats_the_stored_masks(outputs):
    """Epoch-tagged indices (the sampler's tag_epoch, used by jobs.train) on static output: every
    epoch gets the stored rows (no IndexError at epoch 1)."""
    ds = MlmShardDataset(str(outputs / "static"))
    sampler = ResumableSampler(len(ds), seed=0, tag_epoch=True)
    loader = DataLoader(ds, batch_size=16, sampler=sampler, collate_fn=MlmCollator())
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        labels = torch.cat([batch["labels"] for batch in loader])
        seen.append(labels[torch.argsort(torch.as_tensor(sampler.order()))])
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[1], seen[2])
    stored = ds.__getitems__(list(range(len(ds))))["labels"]
    np.testing.assert_array_equal(seen[2].numpy(), stored.astype(np.int64))


def test_inspect_check_line_turns_false_on_a_corrupted_output(outputs, tmp_path, capsys):
    import json
    import shutil

    from jobs.inspect_output import run

    assert run([str(outputs / "static")])["ok"]
    broken = tmp_path / "broken"
    shutil.copytree(outputs / "static", broken)
    manifest = json.loads((broken / m.MANIFEST_FILE).read_text())
    manifest[m.KEY_CONFIG]["mask_replace_prob"] = 0.5  # the stored masks were made with 0.8
    (broken / m.MANIFEST_FILE).write_text(json.dumps(manifest))
    stats = run([str(broken)])
    captured = capsys.readouterr()
    assert not stats["ok"] and captured.out.strip().splitlines()[-1] == "False"
    assert "check failed: [MASK] ratio" in captured.err


def test_saved_tokenizer_truncates_to_the_model_length(spec, tmp_path):
    from transformers import AutoTokenizer

    from pipeline.consumers.training.saved_model import hf_tokenizer

    hf_tokenizer(spec, 512).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.model_max_length == 512
    assert len(loaded("word " * 2000, truncation=True)["input_ids"]) == 512


def _consume(sampler: ResumableSampler, steps: int, batch: int) -> list[int]:
    """`steps` batches of this rank's indices, reported consumed as a training loop would."""
    it, out = iter(sampler), []
    for _ in range(steps):
        got = [next(it) for _ in range(batch)]
        sampler.advance(len(got))
        out += got
    return out


SHARD_ROWS = [13, 7, 20, 30, 10, 25, 15]  # 120 rows in 7 shards of unequal sizes


def _ranks(n: int, world: int, epoch: int = 0, state: dict | None = None,
           windowed: bool = False) -> list[ResumableSampler]:
    windows = {"shard_rows": SHARD_ROWS, "window_shards": 2} if windowed else {}
    samplers = [ResumableSampler(n, seed=5, rank=r, world_size=world, tag_epoch=True, **windows)
                for r in range(world)]
    for s in samplers:
        s.set_epoch(epoch)
        if state:
            s.load_state_dict(state)
    return samplers


@pytest.mark.parametrize("windowed", [False, True], ids=["global", "shard-windows"])
@pytest.mark.parametrize("resume_world", [1, 3])
@pytest.mark.parametrize("stop_steps", [3, 15])  # mid-epoch, and exactly at the end of epoch 0
def test_elastic_resume_consumes_exactly_what_an_uninterrupted_run_would(resume_world, stop_steps, windowed):
    """Saved on 2 ranks, resumed on 1 or 3: the union of consumed (epoch, index) pairs equals the
    uninterrupted run's, with no duplicate and no gap, across the epoch boundary; the tags carry
    each sample's own epoch (what dynamic masks use). Also when rows are shuffled within windows of
    shards (a shard cache smaller than the split)."""
    n, batch, into_next = 120, 4, 24  # every share divides evenly: no wrap-around padding
    reference, ranks = [], _ranks(n, 2, windowed=windowed)
    for s in ranks:
        reference += _consume(s, n // 2 // batch, batch)
    for s in ranks:
        s.set_epoch(1)
        reference += _consume(s, into_next // 2 // batch, batch)
    consumed, ranks = [], _ranks(n, 2, windowed=windowed)
    for s in ranks:
        consumed += _consume(s, stop_steps, batch)
    state = ranks[0].state_dict()
    assert state["global_position"] == 2 * batch * stop_steps
    resumed = _ranks(n, resume_world, state=state, windowed=windowed)
    left = (n - state["global_position"]) // resume_world
    if left:
        assert all(s.epoch == 0 and len(s) == left for s in resumed)
        for s in resumed:
            consumed += _consume(s, left // batch, batch)
    else:  # saved at the end of epoch 0: the resumed run starts epoch 1
        assert all(s.epoch == 1 for s in resumed)
    for s in resumed:
        s.set_epoch(1)
        consumed += _consume(s, into_next // resume_world // batch, batch)
    decoded = [divmod(value, n) for value in consumed]
    assert sorted(decoded) == sorted(divmod(value, n) for value in reference)
    assert len(set(decoded)) == len(decoded)  # no duplicate
    assert sorted(i for e, i in decoded if e == 0) == list(range(n))  # no gap in epoch 0


@pytest.mark.parametrize("resumed_windows", [4, 0], ids=["windows-of-4", "no-windows"])
def test_a_resume_with_another_window_layout_keeps_the_saved_order_to_the_epochs_end(resumed_windows):
    """Saved on 2 ranks reading windows of 3 shards, resumed on 3 ranks with windows of 4 (a larger
    --cache_limit) or none (local data): the rest of epoch 0 is the saved order, so the 120 rows are
    each seen once (the layout alone gives 111 and 94 distinct rows); a state saved again
    mid-way still holds the saved layout; epoch 1 takes the new layout."""
    layout = lambda k: {"shard_rows": SHARD_ROWS, "window_shards": k} if k else {}  # noqa: E731
    reference = list(ResumableSampler(120, seed=5, **layout(3)))
    saved = [ResumableSampler(120, seed=5, rank=r, world_size=2, **layout(3)) for r in range(2)]
    consumed = [i for s in saved for i in _consume(s, 6, 4)]
    state = saved[0].state_dict()
    resumed = [ResumableSampler(120, seed=5, rank=r, world_size=3, **layout(resumed_windows)) for r in range(3)]
    for s in resumed:
        s.load_state_dict(state)
        consumed += _consume(s, 4, 4)
    again = resumed[0].state_dict()
    for r in range(3):
        s = ResumableSampler(120, seed=5, rank=r, world_size=3, **layout(resumed_windows))
        s.load_state_dict(again)
        consumed += list(s)
    assert sorted(consumed) == list(range(120)) and set(consumed) == set(reference)
    assert state["window_shards"] == again["window_shards"] == 3 and again["shard_rows"] == SHARD_ROWS
    fresh, later = (ResumableSampler(120, seed=5, **layout(resumed_windows)) for _ in range(2))
    later.load_state_dict(again)
    fresh.set_epoch(1)
    later.set_epoch(1)  # the next epoch: this run's own layout
    assert later.state_dict()["window_shards"] == resumed_windows
    assert np.array_equal(later.stream(), fresh.stream())


@pytest.mark.parametrize("saved_windows, resumed_windows, match", [
    (4, 3, "reading windows of 4 shards; this run's shard cache holds 3: resume with the earlier --cache_limit"),
    (0, 3, "in an order over the whole split, which this run's shard cache .* cannot hold"),
])
def test_a_resume_whose_cache_cannot_hold_the_saved_order_is_refused(saved_windows, resumed_windows, match):
    """Windows larger than this run's cache, or an order over the whole split: refused in one line
    (mid-epoch); at an epoch's end any layout resumes."""
    layout = lambda k: {"shard_rows": SHARD_ROWS, "window_shards": k} if k else {}  # noqa: E731
    saved = ResumableSampler(120, seed=5, **layout(saved_windows))
    _consume(saved, 5, 4)
    with pytest.raises(ValueError, match=match):
        ResumableSampler(120, seed=5, **layout(resumed_windows)).load_state_dict(saved.state_dict())
    _consume(saved, 25, 4)
    at_end = ResumableSampler(120, seed=5, **layout(resumed_windows))
    at_end.load_state_dict(saved.state_dict())
    assert at_end.epoch == 1 and sorted(at_end) == list(range(120))


def test_shard_windows_read_a_few_shards_at_a_time_and_announce_the_next():
    """Windowed order: a permutation of the rows, a pure function of (seed, epoch); each window's
    rows come from its own shards only; the sampler announces each window with the next one (the
    next epoch's first after the last), before handing out its first row."""
    offsets = np.cumsum([0, *SHARD_ROWS])
    shard_of = np.searchsorted(offsets, np.arange(sum(SHARD_ROWS)), side="right") - 1
    calls = []
    sampler = ResumableSampler(120, seed=9, shard_rows=SHARD_ROWS, window_shards=3,
                               on_window=lambda current, upcoming, behind: calls.append((current, upcoming, len(seen))))
    seen: list[int] = []
    for value in sampler:
        seen.append(value)
    assert sorted(seen) == list(range(120)) and seen == list(ResumableSampler(
        120, seed=9, shard_rows=SHARD_ROWS, window_shards=3))
    plan = sampler.windows(0)
    assert sorted(sum(plan, [])) == list(range(7)) and [len(w) for w in plan] == [3, 3, 1]
    assert [c[0] for c in calls] == plan and [c[1] for c in calls] == [plan[1], plan[2], sampler.windows(1)[0]]
    position = 0
    for current, _, first in calls:  # every row until the next announcement is of this window's shards
        size = sum(SHARD_ROWS[i] for i in current)
        assert first == position and set(shard_of[seen[position:position + size]]) == set(current)
        position += size
    sampler.set_epoch(1)
    assert sampler.windows(1) != plan or list(sampler) != seen  # another epoch, another order


def test_sampler_state_mid_epoch_needs_counted_consumption(outputs):
    ds = MlmShardDataset(str(outputs / "static"))
    sampler = ResumableSampler(len(ds), seed=0)
    batches = iter(DataLoader(ds, batch_size=4, sampler=sampler, collate_fn=MlmCollator()))
    next(batches)
    with pytest.raises(RuntimeError, match="ResumableLoader"):
        sampler.state_dict()  # a plain DataLoader: nobody counted, and 0 would silently replay


@pytest.mark.parametrize("persistent", [False, True])
def test_resumable_loader_state_is_exact_under_worker_prefetch(outputs, persistent):
    from pipeline.consumers.loading import ResumableLoader

    ds = MlmShardDataset(str(outputs / "dynamic"))

    def loader(state=None):
        sampler = ResumableSampler(len(ds), seed=3, tag_epoch=True)
        if state:
            sampler.load_state_dict(state)
        return ResumableLoader(ds, sampler=sampler, batch_size=8, num_workers=2, prefetch_factor=4,
                               persistent_workers=persistent, collate_fn=MlmCollator())

    whole = list(loader())
    first = loader()
    batches = iter(first)
    head = [next(batches) for _ in range(3)]  # the workers have prefetched well beyond these
    state = first.state_dict()
    assert state["position"] == 24 and state["global_position"] == 24
    del batches
    tail = list(loader(state))
    for key in ("input_ids", "labels"):
        assert torch.equal(torch.cat([b[key] for b in head + tail]), torch.cat([b[key] for b in whole]))


def test_with_format_gives_int16_and_the_collators_give_int64(outputs):
    import datasets
    from transformers import default_data_collator

    dd = datasets.load_from_disk(str(outputs / "static"))
    assert str(dd[m.TRAIN].with_format("arrow")[:1]["input_ids"].type.value_type) == "int16"  # as stored
    # datasets' own formatters widen on the way out in this version; older ones handed out int16
    assert dd[m.TRAIN].with_format("torch")[0]["input_ids"].dtype in (torch.int16, torch.int64)
    for collate in (default_data_collator, MlmCollator()):
        batch = collate([dd[m.TRAIN][i] for i in range(4)])
        assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64


def test_compact_batches_widen_to_the_same_int64_values(outputs):
    from pipeline.consumers.loading import ResumableLoader

    ds = MlmShardDataset(str(outputs / "dynamic"))
    plain = next(iter(DataLoader(ds, batch_size=16, sampler=ResumableSampler(len(ds), seed=2, tag_epoch=True),
                                 collate_fn=MlmCollator(trim_padding=True))))
    compact_loader = ResumableLoader(ds, batch_size=16, sampler=ResumableSampler(len(ds), seed=2, tag_epoch=True),
                                     collate_fn=MlmCollator(trim_padding=True, compact=True), widen=False)
    compact = next(iter(compact_loader))
    assert compact["input_ids"].dtype == torch.int16 and compact["attention_mask"].dtype == torch.int8
    widened = next(iter(ResumableLoader(ds, batch_size=16, collate_fn=MlmCollator(trim_padding=True, compact=True),
                                        sampler=ResumableSampler(len(ds), seed=2, tag_epoch=True))))
    for key in plain:
        assert widened[key].dtype == torch.int64 and torch.equal(widened[key], plain[key])
        assert torch.equal(compact[key].long(), plain[key])


# -- epochs without set_epoch, padding by windows (issue 23.10) ------------------------------------


def test_a_second_iteration_without_set_epoch_starts_the_next_epoch():
    """A plain epoch loop that never calls set_epoch: the second pass yields the next epoch, not nothing
    (counted to the end) nor epoch 0 again (uncounted), and len() says a full share."""
    fresh = ResumableSampler(10, seed=1)
    fresh.set_epoch(1)
    epoch1 = list(fresh)
    plain = ResumableSampler(10, seed=1)
    first = list(plain)
    assert len(plain) == 10
    assert list(plain) == epoch1 and plain.epoch == 1
    counted = ResumableSampler(10, seed=1, world_size=3, rank=2)
    assert _consume(counted, 2, 2) == list(ResumableSampler(10, seed=1, world_size=3, rank=2))  # all 4
    assert len(counted) == 4  # the next iteration's: epoch 1, whole
    again = list(counted)
    assert len(again) == 4 and counted.epoch == 1 and sorted(first) == list(range(10))
    looped = ResumableSampler(10, seed=1, world_size=3, rank=2)
    _consume(looped, 2, 2)
    looped.set_epoch(1)  # a loop that does call set_epoch gets the same
    assert len(looped) == 4 and list(looped) == again


@pytest.mark.parametrize("world", [3, 7])  # 120 rows: 3 divides, 7 pads one row on six ranks
def test_padding_never_reenters_a_finished_window(world):
    """When the world size does not divide n, the padding wrapped to the stream's start: the rank
    that got it re-entered window 0 at the epoch's end (downloading two finished windows again) and
    announced window 1 as upcoming, dropping the next epoch's prefetched first window."""
    offsets = np.cumsum([0, *SHARD_ROWS])
    shard_of = np.searchsorted(offsets, np.arange(sum(SHARD_ROWS)), side="right") - 1
    seen = set()
    for rank in range(world):
        calls = []
        sampler = ResumableSampler(120, seed=4, rank=rank, world_size=world, shard_rows=SHARD_ROWS, window_shards=2,
                                   on_window=lambda current, upcoming, behind, calls=calls: calls.append((current, upcoming)))
        got = list(sampler)
        plan = sampler.windows(0)
        assert len(got) == len(sampler) == -(-120 // world)
        assert [c[0] for c in calls] == plan, f"rank {rank} entered {[c[0] for c in calls]}"
        assert calls[-1][1] == sampler.windows(1)[0]
        assert set(shard_of[got[-1]].flatten()) <= set(plan[-1])  # a pad is a row of the last window
        seen.update(got)
    assert seen == set(range(120))


# -- manifest numbers checked against the files before anything is sized by them (issue 26.7) ------


def _crafted(outputs, tmp_path, change) -> str:
    """The dynamic output with its manifest changed by `change` (shards linked, not copied)."""
    import json

    folder = tmp_path / "crafted"
    folder.mkdir()
    manifest = json.loads((outputs / "dynamic" / m.MANIFEST_FILE).read_text())
    change(manifest)
    (folder / m.MANIFEST_FILE).write_text(json.dumps(manifest))
    for split in m.SPLITS:
        (folder / split).symlink_to(outputs / "dynamic" / split)
    return str(folder)


@pytest.mark.parametrize("rows, match", [(5_000_000_000, "room for at most"), (5e9, "non-negative integer"),
                                         (-1, "non-negative integer"), ("12", "non-negative integer")])
def test_manifest_rows_that_the_files_cannot_hold_are_refused_at_open(outputs, tmp_path, rows, match):
    """`rows: 5e9` in one shard made the sampler's permutation ask for 37 GiB before any check."""
    import tracemalloc

    from pipeline.consumers.loading.split_files import ManifestMismatch

    def change(manifest):
        manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS][1][m.KEY_ROWS] = rows

    folder = _crafted(outputs, tmp_path, change)
    tracemalloc.start()
    try:
        # refused by the manifest validator every consumer runs first (schemas.manifest), or by the
        # loader's own bound on what it allocates: either way before anything is sized by the number
        with pytest.raises((ManifestMismatch, BadManifest), match=f"{match}|expected an integer"):
            MlmShardDataset(folder)
        assert tracemalloc.get_traced_memory()[1] < 50_000_000
    finally:
        tracemalloc.stop()
    with pytest.raises(ValueError, match="integer >= 1"):
        ResumableSampler(5e9, seed=0)
    with pytest.raises(ValueError, match="rows of a shard"):
        ResumableSampler(3, seed=0, shard_rows=[1.5, 1.5], window_shards=1)


def test_manifest_rows_within_the_bound_are_checked_exactly_when_a_shard_opens(outputs, tmp_path):
    def change(manifest):  # consistent totals, so the manifest validator passes it: the file tells
        manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS][0][m.KEY_ROWS] -= 1
        manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_ROWS] -= 1

    ds = MlmShardDataset(_crafted(outputs, tmp_path, change))
    with pytest.raises(ValueError, match="rows, the manifest says"):
        ds.__getitems__([0])


# -- the same batches from s3:// through the cache, over ranks, workers and epochs -----------------

BUCKET = "maskbeam-loader"


@pytest.fixture(scope="module")
def on_s3(outputs, moto_endpoint):
    """The dynamic output on moto's S3 server (tests/conftest.py), read through s3fs."""
    import boto3

    patch = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": moto_endpoint}.items():
        patch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted((outputs / "dynamic").rglob("*")):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"dynamic/{path.relative_to(outputs / 'dynamic').as_posix()}")
    yield f"s3://{BUCKET}/dynamic", client
    patch.undo()


def _epochs(ds, world: int, workers: int, epochs: int = 2) -> list[list[dict]]:
    """Each rank's batches over `epochs` epochs of a loop that never calls set_epoch."""
    from pipeline.consumers.loading import ResumableLoader

    per_rank = []
    for rank in range(world):
        sampler = ResumableSampler(len(ds), seed=6, rank=rank, world_size=world, tag_epoch=True)
        loader = ResumableLoader(ds, sampler=sampler, batch_size=16, collate_fn=MlmCollator(compact=True),
                                 num_workers=workers, persistent_workers=workers > 0)
        batches = []
        for _ in range(epochs):
            assert len(loader) > 0
            epoch = [dict(batch) for batch in loader]
            assert len(epoch) == len(loader)
            batches.append(epoch)
        per_rank.append(batches)
    return per_rank


@pytest.mark.parametrize("world, workers", [(2, 0), (1, 2)], ids=["2-ranks-0-workers", "1-rank-2-persistent-workers"])
def test_s3_through_the_cache_gives_the_local_batches_over_epochs(outputs, on_s3, tmp_path, world, workers):
    url, _ = on_s3
    cache = tmp_path / "cache"
    local = MlmShardDataset(str(outputs / "dynamic"))
    remote = [MlmShardDataset(url, cache_dir=str(cache)) for _ in range(world)]  # ranks of one node, one cache
    assert sum(ds.cache.downloads for ds in remote) == len(local.paths)  # the second rank found them cached
    want, got = _epochs(local, world, workers), [_epochs(ds, world, workers)[rank] for rank, ds in enumerate(remote)]
    for rank in range(world):
        for epoch in range(2):
            assert len(got[rank][epoch]) == len(want[rank][epoch])
            for a, b in zip(got[rank][epoch], want[rank][epoch]):
                assert all(torch.equal(a[key], b[key]) for key in b)
    for epoch in range(2):  # each epoch whole on every rank (the second too)
        rows = sum(b["input_ids"].shape[0] for rank in range(world) for b in got[rank][epoch])
        assert rows == world * -(-len(local) // world)
    first = torch.cat([b["labels"] for b in got[0][0]])
    second = torch.cat([b["labels"] for b in got[0][1]])
    assert not torch.equal(first, second)
    for ds in remote:
        ds.close()
    assert not [p for p in cache.rglob("*") if ".partial-" in p.name]


def test_a_crafted_sha256_on_s3_reads_nothing_outside_the_cache(on_s3, tmp_path):
    import json

    url, client = on_s3
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key=f"dynamic/{m.MANIFEST_FILE}")["Body"].read())
    manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS][0][m.KEY_SHA256] = "../../victim/planted"
    for key in [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="dynamic/")["Contents"]]:
        if not key.endswith(m.MANIFEST_FILE):
            client.copy_object(Bucket=BUCKET, Key="crafted/" + key.split("/", 1)[1],
                               CopySource={"Bucket": BUCKET, "Key": key})
    client.put_object(Bucket=BUCKET, Key=f"crafted/{m.MANIFEST_FILE}", Body=json.dumps(manifest).encode())
    cache = tmp_path / "c" / "a" / "b"
    cache.mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "planted.arrow").write_bytes(b"planted")
    with pytest.raises((ShardCacheError, BadManifest), match="64 lowercase hex digits"):
        MlmShardDataset(f"s3://{BUCKET}/crafted", cache_dir=str(cache))
    assert [p.name for p in (tmp_path / "victim").iterdir()] == ["planted.arrow"]
