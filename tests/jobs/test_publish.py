"""jobs.publish offline: the dry-run folder loads back; the upload is exercised against an
autospec HfApi (the Hub's servers cannot exist here)."""

from __future__ import annotations

import logging
import os
from unittest import mock

import datasets
import httpx2
import numpy as np
import pytest
import yaml
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from pipeline.consumers.outputs import manifest_with_inputs
from pipeline.consumers.publish import PublishError, build_upload_folder, publish_streaming, with_retries
from schemas import manifest as m
from tests.conftest import REPO, run_preprocess

pytestmark = pytest.mark.slow
TOKEN = "hf_SECRETsecretSECRETsecret1234567890"


@pytest.fixture(scope="module")
def outputs(small_books, tmp_path_factory):
    base = tmp_path_factory.mktemp("publish")
    run_preprocess([small_books], base / "static", "--num_shards", "2", "--max_seq_length", "128")
    run_preprocess([small_books], base / "dynamic", "--masking", "dynamic", "--max_seq_length", "128")
    return base


def _card_yaml(folder):
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1]), text


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_dry_run_folder_loads_like_the_source(outputs, tmp_path, mode, capsys, small_books):
    from jobs.publish import run

    folder = tmp_path / "upload"
    run([str(outputs / mode), "--repo_id", "someone/books-mlm", "--dry_run", str(folder), "--license", "cc0-1.0"])
    hub = datasets.load_dataset(str(folder))
    local = datasets.load_from_disk(str(outputs / mode))
    assert set(hub) == set(local) == set(m.SPLITS)
    for split in m.SPLITS:
        assert hub[split].num_rows == local[split].num_rows
        assert hub[split].features == local[split].features
        for column in local[split].column_names:
            np.testing.assert_array_equal(np.asarray(hub[split].with_format("numpy")[column]),
                                          np.asarray(local[split].with_format("numpy")[column]))
    meta, text = _card_yaml(folder)
    named = {p for config in meta["configs"] for entry in config["data_files"] for p in entry["path"]}
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet")}
    assert named == on_disk and len(on_disk) >= 2
    assert meta["license"] == "cc0-1.0" and meta["task_categories"] == ["fill-mask"]
    assert {s["name"]: s["num_examples"] for s in meta["dataset_info"]["splits"]} == \
        {split: local[split].num_rows for split in m.SPLITS}
    assert "load_dataset(\"someone/books-mlm\")" in text and (folder / m.MANIFEST_FILE).exists()
    assert ("default_data_collator" in text) == (mode == "static")
    # no local path leaves the machine: inputs relative to their root, the tokenizer by its name
    published = manifest_with_inputs(str(folder))  # the published INPUTS_FILE, checked against its manifest
    source = manifest_with_inputs(str(outputs / mode))
    everything = (folder / m.MANIFEST_FILE).read_text() + (folder / m.INPUTS_FILE).read_text() + text
    for leak in (str(tmp_path.parent.parent), str(small_books), str(outputs), os.path.expanduser("~")):
        assert leak not in everything
    assert sorted(e[m.KEY_PATH] for e in published[m.KEY_INPUTS]) == sorted(
        e[m.KEY_PATH].rsplit("/", 1)[1] for e in source[m.KEY_INPUTS])
    assert published[m.KEY_CONFIG]["inputs"] == [small_books.name]
    # named by its origin: the shared folder's and the embedded copy are both bert-base-uncased
    assert published[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH] == "bert-base-uncased" and "`bert-base-uncased`" in text
    assert published[m.KEY_TOKENIZER][m.KEY_SHA256] == source[m.KEY_TOKENIZER][m.KEY_SHA256]
    assert published[m.KEY_SPLITS] == source[m.KEY_SPLITS] and published[m.KEY_COUNTS] == source[m.KEY_COUNTS]
    # the tokenizer travels with the data, its special tokens named (tests/jobs/test_handoff.py trains on it)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    ids = published[m.KEY_TOKENIZER][m.KEY_SPECIAL_IDS]
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id) == \
        (ids["cls"], ids["sep"], ids["pad"], ids["mask"]) == (101, 102, 0, 103)
    assert "| `input_ids` | int16 | [128] |" in text and "`[CLS]` content `[SEP]` `[PAD]`..." in text


def test_an_empty_split_is_left_out_of_the_hub_layout(small_books, tmp_path):
    out = tmp_path / "out"
    run_preprocess([small_books], out, "--validation_fraction", "0", "--max_seq_length", "128")
    folder = build_upload_folder(str(out), str(tmp_path / "upload"), repo_id="a/b")
    assert not [f for f in folder.files if "validation" in f]
    hub = datasets.load_dataset(str(folder.path))  # an empty split's file made this fail
    assert set(hub) == {m.TRAIN} and hub[m.TRAIN].num_rows == datasets.load_from_disk(str(out))[m.TRAIN].num_rows
    meta, _ = _card_yaml(folder.path)
    assert [s["name"] for s in meta["dataset_info"]["splits"]] == [m.TRAIN]


def test_public_manifest_paths():
    from pipeline.consumers.public_manifest import public_name, relative_to_roots

    assert public_name("bert-base-uncased") == "bert-base-uncased"  # Hub ids as given
    assert public_name("google/bert_uncased_L-2_H-128_A-2") == "google/bert_uncased_L-2_H-128_A-2"
    assert public_name("/home/me/tok/tokenizer.json") == "tokenizer.json"
    assert public_name("./tok") == "tok"
    assert relative_to_roots("s3://bucket/me/books/a/b.txt", ["s3://bucket/me/books"]) == "a/b.txt"
    assert relative_to_roots("/data/x/b.txt", ["/data", "/data/x"]) == "b.txt"
    assert relative_to_roots("/elsewhere/c.txt", ["/data"]) == "c.txt"


def test_both_formats_parquet_default_and_arrow_copies(outputs, tmp_path):
    folder = build_upload_folder(str(outputs / "static"), str(tmp_path / "both"), repo_id="a/b", fmt="both")
    meta, text = _card_yaml(folder.path)
    assert [c["config_name"] for c in meta["configs"]] == ["default"] and "arrow/" in text
    local = datasets.load_from_disk(str(outputs / "static"))
    assert datasets.load_dataset(str(folder.path))[m.TRAIN].num_rows == local[m.TRAIN].num_rows
    arrow_files = sorted(str(p) for p in (folder.path / "arrow").glob("train-*.arrow"))
    assert sum(datasets.Dataset.from_file(p).num_rows for p in arrow_files) == local[m.TRAIN].num_rows


def _http_error(status):
    request = httpx2.Request("POST", "https://huggingface.co/api/repos/create")
    return HfHubHTTPError(f"{status} error for token {TOKEN}", response=httpx2.Response(status, request=request))


def _committed(api) -> list[str]:
    return sorted(op.path_in_repo for op in api.create_commit.call_args.kwargs["operations"])


def test_upload_calls_and_token_paths(outputs, tmp_path, monkeypatch):
    folder = build_upload_folder(str(outputs / "static"), str(tmp_path / "f"), repo_id="someone/books")
    api = mock.create_autospec(HfApi, instance=True)
    publish_streaming(str(outputs / "static"), "someone/books", token=TOKEN, private=True, api=api,
                      sleep=lambda s: None)
    api.create_repo.assert_called_once_with("someone/books", repo_type="dataset", private=True, exist_ok=True,
                                            token=TOKEN)
    kwargs = api.create_commit.call_args.kwargs
    assert api.create_commit.call_args.args == ("someone/books",)
    assert kwargs["repo_type"] == "dataset" and kwargs["token"] == TOKEN
    assert _committed(api) == sorted(folder.files)  # exactly the dry run's layout
    assert {*m.TOKENIZER_FILES, m.INPUTS_FILE} <= set(folder.files)  # the tokenizer and inputs travel with the data
    for name in (*m.TOKENIZER_FILES, m.INPUTS_FILE):
        committed = next(op for op in kwargs["operations"] if op.path_in_repo == name).path_or_fileobj
        assert committed == (folder.path / name).read_bytes()
    # every data file and INPUTS_FILE, before the commit (not the card, the manifest or the tokenizer files)
    assert api.preupload_lfs_files.call_count == len(folder.files) - 2 - len(m.TOKENIZER_FILES)
    monkeypatch.setenv("HF_TOKEN", "hf_fromenvironment")
    api = mock.create_autospec(HfApi, instance=True)
    publish_streaming(str(outputs / "static"), "someone/books", api=api)
    assert api.create_repo.call_args.kwargs["token"] == "hf_fromenvironment"
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(PublishError, match="no Hugging Face token"):
        publish_streaming(str(outputs / "static"), "someone/books", api=mock.create_autospec(HfApi, instance=True))


def test_retry_on_429_and_5xx_then_clear_errors(outputs, tmp_path, caplog):
    api = mock.create_autospec(HfApi, instance=True)
    api.create_commit.side_effect = [_http_error(429), _http_error(503), None]
    delays = []
    with caplog.at_level(logging.WARNING):
        publish_streaming(str(outputs / "static"), "someone/books", token=TOKEN, api=api, sleep=delays.append)
    assert api.create_commit.call_count == 3 and delays == [2.0, 4.0]
    for status, message in ((401, "refused the token"), (403, "refused the token"), (404, "HTTP 404")):
        api = mock.create_autospec(HfApi, instance=True)
        api.create_repo.side_effect = _http_error(status)
        with pytest.raises(PublishError, match=message) as error:
            publish_streaming(str(outputs / "static"), "someone/books", token=TOKEN, api=api, sleep=lambda s: None)
        assert TOKEN not in str(error.value)
        assert api.create_repo.call_count == 1  # no retry on client errors
    with pytest.raises(PublishError, match="HTTP 429"):
        with_retries(mock.Mock(side_effect=_http_error(429)), TOKEN, attempts=2, sleep=lambda s: None)
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("repo_id", ["noslash", "a/b/c", "/name", "user/", "user/na me", "user/../x"])
def test_bad_repo_ids_are_refused(outputs, repo_id, capsys):
    from jobs.publish import run

    with pytest.raises(SystemExit) as error:
        run([str(outputs / "static"), "--repo_id", repo_id, "--dry_run", "/tmp/never"])
    assert error.value.code != 0 and "USER/NAME" in capsys.readouterr().err


def test_token_never_leaks_into_output_or_logs(outputs, tmp_path, capsys, caplog):
    from jobs.publish import run

    api = mock.create_autospec(HfApi, instance=True)
    api.create_commit.side_effect = [_http_error(500), None]
    with caplog.at_level(logging.DEBUG), mock.patch("pipeline.consumers.publish.time.sleep"):
        run([str(outputs / "dynamic"), "--repo_id", "someone/books", "--token", TOKEN], api=api)
    folder = tmp_path / "dry"
    run([str(outputs / "dynamic"), "--repo_id", "someone/books", "--token", TOKEN, "--dry_run", str(folder)])
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err + caplog.text
    for path in folder.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes()


def test_preprocess_push_to_hub_publishes_after_the_run(small_books, tmp_path, monkeypatch):
    api = mock.create_autospec(HfApi, instance=True)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with mock.patch("huggingface_hub.HfApi", return_value=api):
        run_preprocess([small_books], tmp_path / "out", "--push_to_hub", "someone/books", "--hub_private")
    api.create_repo.assert_called_once_with("someone/books", repo_type="dataset", private=True, exist_ok=True,
                                            token=TOKEN)
    assert "data/train-00000-of-00001.parquet" in _committed(api)


def test_preprocess_rejects_a_bad_repo_id_before_running(small_books, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_preprocess([small_books], tmp_path / "out", "--push_to_hub", "not a repo")
    assert "USER/NAME" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_the_tokenizer_published_is_the_manifest_s(outputs, tmp_path, capsys):
    """An output without the transformers configs (made before they existed) publishes them; one whose
    tokenizer.json is not the manifest's tokenizer is refused, naming the file."""
    import shutil

    from jobs.publish import run

    old = tmp_path / "old"
    shutil.copytree(outputs / "static", old)
    for name in (m.TOKENIZER_CONFIG_FILE, m.SPECIAL_TOKENS_MAP_FILE):
        (old / name).unlink()
    folder = build_upload_folder(str(old), str(tmp_path / "up"), repo_id="a/b")
    for name in m.TOKENIZER_FILES:
        assert (folder.path / name).read_bytes() == (outputs / "static" / name).read_bytes()
    (old / m.TOKENIZER_FILE).write_text((REPO / "tests" / "data" / "tokenizers" / "roberta.json").read_text())
    with pytest.raises(SystemExit) as error:
        run([str(old), "--repo_id", "a/b", "--dry_run", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert error.value.code == 1 and "tokenizer.json" in err and "not the tokenizer the manifest names" in err
    assert not (tmp_path / "refused").exists()
