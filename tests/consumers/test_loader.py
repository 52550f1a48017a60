"""The PyTorch loader over real preprocess output."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeline.consumers.inspection import read_split_rows
from pipeline.consumers.loader import MlmCollator, MlmShardDataset, ResumableSampler
from pipeline.consumers.outputs import load_manifest, masking_rule
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


def test_dynamic_masks_repeat_per_epoch_and_change_between_epochs(outputs):
    ds = MlmShardDataset(str(outputs / "dynamic"))
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


def test_static_rows_are_returned_as_stored(outputs):
    import datasets

    ds = MlmShardDataset(str(outputs / "static"))
    hf = datasets.load_from_disk(str(outputs / "static"))[m.TRAIN].with_format("numpy")
    batch = ds.__getitems__([0, len(ds) - 1])
    np.testing.assert_array_equal(batch["input_ids"][1], hf[len(ds) - 1]["input_ids"])
    np.testing.assert_array_equal(batch["labels"][0], hf[0]["labels"])


def test_dataset_pickles_without_data_and_workers_agree(outputs):
    ds = MlmShardDataset(str(outputs / "dynamic"), epoch=1)
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
    epoch gets the stored rows; it used to stop at epoch 1 with an IndexError."""
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

    from pipeline.consumers.training import hf_tokenizer

    hf_tokenizer(spec, 512).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.model_max_length == 512
    assert len(loaded("word " * 2000, truncation=True)["input_ids"]) == 512
