"""The trainer and HF Trainer interop on CPU with tiny models and the shared books."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from schemas import manifest as m
from tests.conftest import REPO, binomial_tolerance, run_preprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data128(small_books, tmp_path_factory):
    """Short rows keep CPU training fast; dynamic masks exercise the loader's kernel path."""
    out = tmp_path_factory.mktemp("train") / "data"
    run_preprocess([small_books], out, "--max_seq_length", "128", "--masking", "dynamic",
                   "--validation_fraction", "0.05")
    return out


def _metrics(folder):
    return [json.loads(line) for line in open(folder / "metrics.jsonl")]


def test_tiny_model_learns_and_loads_in_fill_mask(data128, tmp_path):
    from jobs.train import run

    out = tmp_path / "model"
    probe = tmp_path / "probe.txt"
    probe.write_text("the [MASK] of the house.\n")
    final = run(["--data", str(data128), "--output", str(out), "--config", "tiny", "--max_steps", "150",
                 "--batch_size", "16", "--lr", "3e-3", "--warmup_steps", "15", "--eval_every", "50",
                 "--probe", str(probe), "--plot", str(tmp_path / "curves.png")])
    rows = _metrics(out)
    evals = [r for r in rows if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 50, 100, 150]
    # a margin of 5 standard deviations of an accuracy measured on this many targets
    margin = binomial_tolerance(final["eval_accuracy"], final["eval_targets"])
    assert final["eval_accuracy"] > evals[0]["eval_accuracy"] + max(margin, 0.04), evals
    assert final["eval_loss"] < evals[0]["eval_loss"] - 2.0
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(out), device="cpu")
    assert len(fill("the [MASK] of the house.")) == 5
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_killed_run_resumes_to_the_same_losses(data128, tmp_path):
    args = ["--data", str(data128), "--config", "tiny", "--max_steps", "40", "--batch_size", "8",
            "--save_every", "10", "--warmup_steps", "10", "--eval_batches", "2"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    full, killed = tmp_path / "full", tmp_path / "killed"
    done = subprocess.run([sys.executable, "-m", "jobs.train", *args, "--output", str(full)], check=True, env=env,
                          capture_output=True, text=True)
    # stdout is not a terminal: progress goes to the log every --log_every (10) steps, and each evaluation
    progress = re.findall(r"step (\d+)/40  loss \d+\.\d+  lr \S+  tokens/s [\d,]+  ETA \d+:\d\d", done.stderr)
    assert [int(s) for s in progress] == list(range(10, 41, 10)), done.stderr
    assert "eval at step 0: " in done.stderr and "eval at step 40: " in done.stderr
    assert f"saved the model and its tokenizer to {full}" in done.stderr
    proc = subprocess.Popen([sys.executable, "-m", "jobs.train", *args, "--output", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        rows = _metrics(killed) if (killed / "metrics.jsonl").exists() else []
        if (killed / "checkpoint.pt").exists() and any(r.get("step", 0) >= 15 and "loss" in r for r in rows):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert max(r["step"] for r in _metrics(killed)) < 40, "the run finished before it could be killed"
    subprocess.run([sys.executable, "-m", "jobs.train", *args, "--output", str(killed), "--resume"], check=True,
                   env=env, capture_output=True)
    losses = lambda rows: [(r["step"], r["loss"]) for r in rows if "loss" in r]  # noqa: E731
    a, b = losses(_metrics(full)), losses(_metrics(killed))
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 41))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=1e-5)


def _tiny_bert(vocab_size):
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=128))


def test_hf_trainer_static_with_default_collator(small_books, tmp_path):
    import datasets
    from transformers import Trainer, TrainingArguments, default_data_collator

    data = tmp_path / "static"
    run_preprocess([small_books], data, "--max_seq_length", "128")
    train = datasets.load_from_disk(str(data))[m.TRAIN].select(range(64))
    args = TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, max_steps=6,
                             report_to=[], use_cpu=True, logging_steps=1, save_strategy="no")
    trainer = Trainer(model=_tiny_bert(30522), args=args, train_dataset=train, data_collator=default_data_collator)
    result = trainer.train()
    assert np.isfinite(result.training_loss) and result.global_step == 6


def test_hf_trainer_dynamic_with_our_collator_is_epoch_aware(data128, tmp_path):
    import datasets
    from transformers import Trainer, TrainingArguments

    from pipeline.consumers.loader import MlmCollator, epoch_callback

    train = datasets.load_from_disk(str(data128))[m.TRAIN].select(range(32))
    collator = MlmCollator.for_output(str(data128))
    seen = []

    class Recording(MlmCollator):
        def __call__(self, batch):
            out = collator(batch)
            seen.append((collator.epoch, out["labels"].clone()))
            return out

    args = TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=32, num_train_epochs=3,
                             report_to=[], use_cpu=True, remove_unused_columns=False, save_strategy="no",
                             dataloader_drop_last=True, seed=0)
    trainer = Trainer(model=_tiny_bert(30522), args=args, train_dataset=train, data_collator=Recording(),
                      callbacks=[epoch_callback(collator)])
    trainer.train()
    assert [e for e, _ in seen] == [0, 1, 2]
    assert all((labels != -100).any(dim=1).all() for _, labels in seen)
    assert not torch.equal(seen[0][1].sort(dim=0).values, seen[1][1].sort(dim=0).values)


def test_model_vocabulary_must_match_the_data(data128, tmp_path):
    from jobs.train import run

    _tiny_bert(1000).save_pretrained(tmp_path / "small_vocab")
    with pytest.raises(SystemExit, match="vocabulary of 1000 ids but the data was tokenized with 30522"):
        run(["--data", str(data128), "--output", str(tmp_path / "out"), "--model", str(tmp_path / "small_vocab")])


def test_flags_keep_the_config_defaults(data128):
    from jobs.train import parse
    from pipeline.consumers.training import TrainConfig

    cfg = parse(["--data", str(data128), "--output", "unused"])
    assert cfg.trim_padding is TrainConfig.trim_padding is True and cfg.compile is False
    cfg = parse(["--data", str(data128), "--output", "unused", "--no_trim_padding", "--compile"])
    assert cfg.trim_padding is False and cfg.compile is True
    assert cfg.read_mode == "pread"
    with pytest.raises(SystemExit):
        parse(["--data", str(data128), "--output", "unused", "--read_mode", "direct"])


@pytest.mark.parametrize("persistent", [False, True])
def test_hf_trainer_dynamic_masks_follow_the_epoch_in_workers_and_across_a_resume(data128, tmp_path, persistent):
    """2 DataLoader workers (the collate runs in them), persistent or not; 2 epochs of 4 steps; then a
    resume from the checkpoint at step 6 (epoch 1.5: `round` made it epoch 2). Every batch the model sees must be masked with
    (mask_seed, epoch of that step)."""
    import datasets
    from transformers import Trainer, TrainingArguments

    from pipeline.consumers.loader import MlmCollator, epoch_callback
    from pipeline.kernels.masking import mask_rows

    train = datasets.load_from_disk(str(data128))[m.TRAIN].select(range(32))
    ids = np.asarray(train["input_ids"], dtype=np.int32)
    seeds = np.asarray(train["mask_seed"], dtype=np.uint64)
    rule = MlmCollator.for_output(str(data128)).rule
    row_of = {row.tobytes(): i for i, row in enumerate(ids)}

    def run(resume_from=None):
        collator = MlmCollator.for_output(str(data128))
        model = _tiny_bert(30522)
        seen = []
        model.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append((trainer.state.global_step, kwargs["input_ids"].clone(),
                                                      kwargs["labels"].clone())) if module.training else None,
            with_kwargs=True)
        args = TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, num_train_epochs=2,
                                 report_to=[], use_cpu=True, remove_unused_columns=False, save_strategy="steps",
                                 save_steps=6, dataloader_num_workers=2, dataloader_persistent_workers=persistent,
                                 dataloader_drop_last=True, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=collator,
                          callbacks=[epoch_callback(collator)])
        trainer.train(resume_from_checkpoint=resume_from)
        return seen

    def check(seen, steps):
        assert [step for step, _, _ in seen] == steps
        for step, input_ids, labels in seen:
            epoch = step // 4  # 4 steps an epoch
            original = torch.where(labels != -100, labels, input_ids).numpy().astype(np.int32)
            rows = [row_of[row.tobytes()] for row in original]
            expected_ids, expected_labels, _ = mask_rows(ids[rows], seeds[rows], epoch, rule)
            np.testing.assert_array_equal(input_ids.numpy(), expected_ids, err_msg=f"step {step + 1}")
            np.testing.assert_array_equal(labels.numpy(), expected_labels, err_msg=f"step {step + 1}")

    check(run(), list(range(8)))
    check(run(resume_from=str(tmp_path / "run" / "checkpoint-6")), list(range(6, 8)))


def test_two_epochs_with_dataloader_workers(data128, tmp_path):
    """jobs.train with 2 DataLoader workers (compact batches widened on the device) over 2 epochs,
    reading rows through memory maps (the other runs use the default, pread): every step of both
    epochs runs, and the saved sampler state is at the end of epoch 1."""
    from jobs.train import run
    from pipeline.consumers.loader import MlmShardDataset

    out = tmp_path / "model"
    per_epoch = len(MlmShardDataset(str(data128))) // 64
    final = run(["--data", str(data128), "--output", str(out), "--config", "tiny", "--epochs", "2",
                 "--batch_size", "64", "--num_workers", "2", "--eval_batches", "1", "--warmup_steps", "2",
                 "--read_mode", "mmap"])
    steps = [r["step"] for r in _metrics(out) if "loss" in r]
    assert per_epoch >= 2 and steps == list(range(1, 2 * per_epoch + 1))
    assert np.isfinite(final["eval_loss"])
    state = torch.load(out / "checkpoint.pt", weights_only=False)["sampler"]
    assert state["epoch"] == 1 and state["position"] == per_epoch * 64
    assert json.load(open(out / "train_config.json"))["read_mode"] == "mmap"
