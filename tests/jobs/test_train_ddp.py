"""jobs.train data-parallel under torchrun (gloo on CPU), elastic resume across world sizes, stop
signals on one rank and on all, and masked-LM families other than BERT on a byte-level BPE output."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

from pipeline.sample import SAMPLE_BOOKS
from tests.conftest import REPO, run_preprocess
from tests.jobs.test_train import _stop_when

pytestmark = pytest.mark.slow


def _samples(folder) -> dict[int, list[list[int]]]:
    """step -> the indices each rank logged for it."""
    by_step = defaultdict(list)
    for path in sorted(folder.glob("samples-rank*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            by_step[row["step"]].append(row["indices"])
    return dict(by_step)


def _weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _workers(proc: subprocess.Popen):
    import psutil

    return lambda: [child.pid for child in psutil.Process(proc.pid).children()]


def test_ranks_and_world_size_changes_train_the_same_model(one_book, tmp_path, caplog):
    """12 rows a step, dropout off, 10 steps: one process with 4 micro-batches of 3 (the reference)
    against 2 ranks x 2 micro-batches of 3 (`--nproc_per_node 2`, our launcher), stopped by a terminal's
    Ctrl-C, resumed under torchrun on 3 ranks x 1 micro-batch of 4, stopped by SIGTERM to one rank,
    resumed on 1 process. Each step sees the same
    rows, ranks never share one, every row of the epoch's first 120 is seen once, and the weights and
    losses equal the reference's within fp32 tolerance."""
    from transformers import BertConfig, BertForMaskedLM

    from jobs.train import run
    from pipeline.consumers.loading import MlmShardDataset, ResumableSampler
    from pipeline.consumers.training.checkpoints import load_checkpoint

    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               max_position_embeddings=128)).save_pretrained(tmp_path / "tiny0")
    common = ["--data", str(one_book), "--model", str(tmp_path / "tiny0"), "--max_steps", "10", "--warmup_steps", "2",
              "--lr", "1e-3", "--eval_rows", "3", "--log_samples", "--log_every", "1"]  # rows at once: watched
    one_rank = ["--batch_size", "3", "--grad_accum", "4"]
    ref, chain = tmp_path / "reference", tmp_path / "chain"
    run([*common, *one_rank, "--output", str(ref)])

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    # our own launcher, stopped as a terminal's Ctrl-C does (SIGINT to its foreground process group)
    first = subprocess.Popen([sys.executable, "-m", "jobs.train", "--nproc_per_node", "2", *common, "--batch_size",
                              "3", "--grad_accum", "2", "--output", str(chain)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    _stop_when(first, chain, 1, signal.SIGINT, lambda: [-first.pid])  # a negative pid: the process group
    _, err1 = first.communicate(timeout=300)
    stopped = [line for line in err1.splitlines() if "stopped by" in line]
    assert len(stopped) == 1 and "continue with: python -m jobs.train --nproc_per_node 2 --data" in stopped[0], err1
    s1 = int(re.search(r"stopped by SIGINT at step (\d+) of 10", stopped[0]).group(1))
    assert first.returncode == 130, err1
    assert "Traceback" not in err1 and "KeyboardInterrupt" not in err1, err1  # one line, nobody's traceback
    assert load_checkpoint(str(chain / "checkpoint.pt"))["step"] == s1 < 10

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    second = subprocess.Popen([*torchrun, "--nproc_per_node", "3", "-m", "jobs.train", *common, "--batch_size", "4",
                               "--output", str(chain), "--resume"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    _stop_when(second, chain, s1 + 1, signal.SIGTERM, lambda: _workers(second)()[1:2])  # SIGTERM on one rank
    _, err2 = second.communicate(timeout=300)
    assert f"resumed at step {s1} (epoch 0, sample {12 * s1}) from 2 ranks onto 3" in err2, err2
    stopped = [line for line in err2.splitlines() if "stopped by" in line]
    assert len(stopped) == 1 and "continue with: torchrun --nproc_per_node 3 -m jobs.train" in stopped[0], err2
    assert "training/loop.py" not in err2, err2  # no traceback of ours
    s2 = int(re.search(r"stopped by SIGTERM at step (\d+) of 10", stopped[0]).group(1))
    assert s1 < s2 < 10 and re.search(r"exitcode\s*:\s*143", err2), err2

    with caplog.at_level(logging.INFO, logger="maskbeam"):
        run([*common, *one_rank, "--output", str(chain), "--resume"])
    assert f"resumed at step {s2} (epoch 0, sample {12 * s2}) from 3 ranks onto 1" in caplog.text

    expected, got = _samples(ref), _samples(chain)
    assert sorted(expected) == sorted(got) == list(range(1, 11))
    for step in range(1, 11):
        ranks = 2 if step <= s1 else 3 if step <= s2 else 1
        assert len(got[step]) == ranks, step
        rows = [i for share in got[step] for i in share]
        assert len(set(rows)) == len(rows) == 12 and sorted(rows) == sorted(expected[step][0]), step
    rows = len(MlmShardDataset(str(one_book)))
    assert rows >= 120 + 3 * 4, rows  # every world size's steps 1..10 lie in epoch 0
    stream = ResumableSampler(rows, seed=0).stream()
    seen = [i for step in range(1, 11) for share in got[step] for i in share]
    assert sorted(seen) == sorted(stream[:120].tolist())  # each of the epoch's first 120 rows exactly once

    losses = lambda folder: [r["loss"] for r in json.loads(f"[{','.join(open(folder / 'metrics.jsonl'))}]")  # noqa: E731
                             if "loss" in r]
    np.testing.assert_allclose(losses(chain), losses(ref), rtol=1e-4)
    ours, theirs = _weights(chain), _weights(ref)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=2e-5, msg=name)
    assert [p for p in os.listdir(chain) if "checkpoint" in p] == ["checkpoint.pt"]  # one, rank 0's, no partial
    assert losses(chain)[-1] < losses(chain)[0]


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    """A byte-level BPE tokenizer (RoBERTa's specials) trained on one book, and that book preprocessed with
    it, everything in train (an empty validation split)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    book = SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"  # the embedded sample's copy: runs without ../shared
    folder = tmp_path_factory.mktemp("bpe")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(book.read_text(encoding="utf-8").splitlines(), trainer)
    (folder / "tok").mkdir()
    tokenizer.save(str(folder / "tok" / "tokenizer.json"))
    run_preprocess([book], folder / "data", "--max_seq_length", "64", "--min_tokens", "16", "--masking", "dynamic", "--validation_fraction",
                   "0", "--tokenizer_backend", "hf", tokenizer=folder / "tok")
    return folder / "data", tokenizer


@pytest.mark.parametrize("arch", ["roberta", "modernbert", "distilbert", "electra"])
def test_bpe_output_trains_other_families_that_fill_masks(bpe_data, arch, tmp_path, caplog):
    """A RoBERTa, ModernBERT, DistilBERT and ELECTRA generator from scratch on a byte-level BPE output
    (another family's tokenizer than BERT's): the saved folder is that family
    (not a BERT), loads with the Auto classes with the data's tokenizer, and fills masks. The empty
    validation split turns evaluation off with one warning (never a 0.0 loss). A RoBERTa folder given as
    --model trains on as a RoBERTa."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    from jobs.train import run

    data, tokenizer = bpe_data
    out = tmp_path / arch
    with caplog.at_level(logging.WARNING, logger="maskbeam"):
        final = run(["--data", str(data), "--output", str(out), "--arch", arch, "--max_steps", "3", "--batch_size", "8",
                     "--warmup_steps", "1"])
    assert final == {} and caplog.text.count("has no validation rows") == 1
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3] and not any("eval_loss" in r for r in rows)
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.config.model_type == arch and model.config.vocab_size == tokenizer.get_vocab_size()
    loaded = AutoTokenizer.from_pretrained(out)
    assert loaded.get_vocab() == tokenizer.get_vocab() and loaded.mask_token == "<mask>"
    fill = pipeline("fill-mask", model=str(out), device="cpu")
    assert len(fill("The paper on the <mask> of the room.")) == 5
    if arch == "roberta":
        run(["--data", str(data), "--output", str(tmp_path / "more"), "--model", str(out), "--max_steps", "1",
             "--batch_size", "8"])
        assert json.loads((tmp_path / "more" / "config.json").read_text())["architectures"] == ["RobertaForMaskedLM"]


def test_kill_9_of_two_ranks_with_dropout_resumes_to_the_uninterrupted_curve(one_book, tmp_path):
    """2 ranks, dropout 0.1, a checkpoint every 4 steps, every process killed with SIGKILL after step 5:
    --resume on 2 ranks gives the losses the run logged before it was killed for the steps after the
    checkpoint (every rank's dropout stream is in the checkpoint; rank 1's used to be re-seeded), and the
    samples logs hold each step once per rank (the steps logged after the checkpoint used to stay,
    duplicated by the resume), each step the sampler's next 6 rows of the epoch. The killed run up to
    its kill is the uninterrupted run: no reference run is needed (one launch of 3 processes less)."""
    import shutil

    from transformers import BertConfig, BertForMaskedLM

    from pipeline.consumers.loading import MlmShardDataset, ResumableSampler
    from pipeline.consumers.training.checkpoints import load_checkpoint

    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                               max_position_embeddings=128)).save_pretrained(tmp_path / "tiny")
    # every step's rows at once (--log_every 1): the steps between the checkpoint and the kill are the
    # uninterrupted run's, what the resumed run must log again
    common = [sys.executable, "-m", "jobs.train", "--nproc_per_node", "2", "--data", str(one_book), "--model",
              str(tmp_path / "tiny"), "--max_steps", "8", "--warmup_steps", "2", "--lr", "1e-3", "--batch_size", "3",
              "--eval_rows", "3", "--save_every", "4", "--log_samples", "--log_every", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    killed, before = tmp_path / "killed", tmp_path / "before_the_kill"
    proc = subprocess.Popen([*common, "--output", str(killed)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ranks = _workers(proc)
    _stop_when(proc, killed, 5, signal.SIGKILL, lambda: [*ranks(), proc.pid])
    proc.wait(timeout=60)
    shutil.copytree(killed, before)
    losses = lambda folder: {r["step"]: r["loss"] for r in map(json.loads, open(folder / "metrics.jsonl"))  # noqa: E731
                             if "loss" in r}
    logged = losses(before)
    saved = load_checkpoint(str(killed / "checkpoint.pt"))["step"]
    assert saved == 4 and 5 <= max(logged) < 8, (saved, sorted(logged))  # steps after the checkpoint were logged
    subprocess.run([*common, "--output", str(killed), "--resume"], env=env, check=True, capture_output=True,
                   timeout=300)
    resumed = losses(killed)
    assert sorted(resumed) == list(range(1, 9))
    np.testing.assert_allclose([resumed[s] for s in sorted(logged)], [logged[s] for s in sorted(logged)], rtol=1e-5)
    got = _samples(killed)
    assert sorted(got) == list(range(1, 9)) and all(len(got[step]) == 2 for step in got)  # each step once per rank
    by_rank = lambda folder: {(r["rank"], r["step"]): r["indices"] for path in sorted(folder.glob("samples-rank*"))  # noqa: E731
                              for r in map(json.loads, path.read_text().splitlines())}
    earlier, now = by_rank(before), by_rank(killed)
    assert earlier and {key: now[key] for key in earlier} == earlier  # the rows each rank saw before the kill
    stream = ResumableSampler(len(MlmShardDataset(str(one_book))), seed=0).stream()
    for step in range(1, 9):
        rows = [i for share in got[step] for i in share]
        assert sorted(rows) == sorted(stream[6 * (step - 1):6 * step].tolist()), step


@pytest.mark.skipif(not os.environ.get("MASKBEAM_TEST_COMPILE"), reason=(
    "torch.compile's first step takes minutes on a CPU (653 s for a tiny BERT on the shared 2-core machine, then "
    "4 s a step with no recompile across batch shapes): set MASKBEAM_TEST_COMPILE=1 to run it"))
def test_compile_with_ddp_and_no_sync_trains_the_uncompiled_curve(one_book, tmp_path):
    """--compile on 2 gloo ranks x 2 micro-batches (DDP around the compiled loss, `no_sync` on the first
    micro-batch of each step), dropout off: the same losses and weights as the uncompiled run, and the
    gathered head's varying target counts (dynamic shapes) compile once, not once per step."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               max_position_embeddings=128)).save_pretrained(tmp_path / "tiny0")
    common = [sys.executable, "-m", "jobs.train", "--nproc_per_node", "2", "--data", str(one_book), "--model",
              str(tmp_path / "tiny0"), "--max_steps", "4", "--warmup_steps", "1", "--lr", "1e-3", "--batch_size", "3",
              "--grad_accum", "2", "--eval_rows", "3"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TORCH_LOGS="recompiles",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))  # its own: a killed compile leaves a cut .so
    plain, compiled = tmp_path / "plain", tmp_path / "compiled"
    subprocess.run([*common, "--output", str(plain)], env=env, check=True, capture_output=True, timeout=600)
    done = subprocess.run([*common, "--compile", "--output", str(compiled)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = lambda folder: [r["loss"] for r in map(json.loads, open(folder / "metrics.jsonl")) if "loss" in r]  # noqa: E731
    assert len(losses(compiled)) == 4
    np.testing.assert_allclose(losses(compiled), losses(plain), rtol=1e-4)
    ours, theirs = _weights(compiled), _weights(plain)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=2e-5, msg=name)
    assert done.stderr.count("Recompiling function") <= 2 * 2, done.stderr[-3000:]  # a first and a dynamic graph
