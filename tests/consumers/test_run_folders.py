"""jobs.train's run folders: a run killed before its first checkpoint starts again without --overwrite
(with or without --resume), anything else is still refused; every rank must see the run folder."""

from __future__ import annotations

import os
import socket

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.consumers.training.ranks import Ranks
from pipeline.consumers.training.run_folders import RunFolderError, check_run_folder, check_shared_output

REMAINS = ["train.log", "train_config.json", "metrics.jsonl", "samples-rank0.jsonl", "samples-rank1.jsonl",
           "checkpoint.pt.partial", "tensorboard/", "wandb/", "checkpoint-5/", "checkpoint-10.partial/"]


def _folder(tmp_path, names):
    """A run folder holding `names` (a trailing / makes a folder with a file in it)."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in names:
        if name.endswith("/"):
            (folder / name).mkdir()
            (folder / name / "x").write_text("x")
        else:
            (folder / name).write_text("x")
    return folder


@pytest.mark.parametrize("resume", [False, True], ids=["rerun", "resume"])
def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path, resume, caplog):
    """kill -9 before the first checkpoint leaves a config, metrics, samples logs, maybe a partial
    checkpoint, TensorBoard and W&B files and checkpoint-STEP/ exports: the same command (or --resume) starts the run again, keeping only the log."""
    folder = _folder(tmp_path, REMAINS)
    with caplog.at_level("WARNING", logger="maskbeam"):
        assert check_run_folder(str(folder), resume=resume, overwrite=False) is False
    assert os.listdir(folder) == ["train.log"] and "saved no checkpoint" in caplog.text


def test_a_checkpoint_resumes_and_a_finished_or_foreign_folder_is_still_refused(tmp_path):
    folder = _folder(tmp_path, [*REMAINS, "checkpoint.pt"])
    assert check_run_folder(str(folder), resume=True, overwrite=False) is True
    with pytest.raises(RunFolderError, match="already holds a jobs.train run: pass --resume"):
        check_run_folder(str(folder), resume=False, overwrite=False)
    os.remove(folder / "checkpoint.pt")
    (folder / "model.safetensors").write_text("a final model")  # not what a killed run leaves: never deleted
    with pytest.raises(RunFolderError, match="has no checkpoint.pt, there is nothing to resume"):
        check_run_folder(str(folder), resume=True, overwrite=False)
    with pytest.raises(RunFolderError, match="already holds a jobs.train run"):
        check_run_folder(str(folder), resume=False, overwrite=False)
    assert (folder / "model.safetensors").exists()
    (tmp_path / "other").mkdir()
    foreign = _folder(tmp_path / "other", ["metrics.jsonl", "notes.txt"])
    with pytest.raises(RunFolderError, match="already holds files"):
        check_run_folder(str(foreign), resume=False, overwrite=False)


def _shared_check_rank(rank: int, port: int, cases: dict[str, list[str]], results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        for case, folders in cases.items():
            try:
                check_shared_output(folders[rank], Ranks(rank, 2, control=dist.group.WORLD), wait_s=1.0)
                results[case, rank] = "ok"
            except RunFolderError as error:
                results[case, rank] = str(error)
    finally:
        dist.destroy_process_group()


def test_every_rank_must_see_the_run_folder(tmp_path):
    """Two gloo ranks: with one folder both go on and no marker is left; when rank 1's --output is
    another folder (a node without the shared filesystem), both fail with one line naming rank 1."""
    cases = {"shared": [str(tmp_path / "a")] * 2, "apart": [str(tmp_path / "b"), str(tmp_path / "c")]}
    for folder in ("a", "b", "c"):
        os.makedirs(tmp_path / folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.get_context("spawn").Manager().dict()
    mp.start_processes(_shared_check_rank, args=(port, cases, results), nprocs=2, start_method="spawn")
    assert results["shared", 0] == results["shared", 1] == "ok"
    for rank in range(2):
        assert "is not shared by every rank: rank 1 cannot see what rank 0 writes there; across machines, put " \
            "--output on a filesystem they all mount" in results["apart", rank], dict(results)
    assert not [name for folder in "abc" for name in os.listdir(tmp_path / folder)]  # no marker left
