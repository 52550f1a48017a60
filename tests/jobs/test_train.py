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

from pipeline.sample import SAMPLE_BOOKS
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
    # 60 steps: the eval loss falls 10.3 -> 6.9 and the accuracy rises 0 -> 0.05 (0.06 after 150 steps,
    # at 2.5x the time); the margins below are what "learns" means here
    final = run(["--data", str(data128), "--output", str(out), "--config", "tiny", "--max_steps", "60",
                 "--batch_size", "16", "--lr", "3e-3", "--warmup_steps", "6", "--eval_every", "20",
                 "--probe", str(probe), "--plot", str(tmp_path / "curves.png")])
    rows = _metrics(out)
    evals = [r for r in rows if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 20, 40, 60]
    # a margin of 5 standard deviations of an accuracy measured on this many targets
    margin = binomial_tolerance(final["eval_accuracy"], final["eval_targets"])
    assert final["eval_accuracy"] > evals[0]["eval_accuracy"] + max(margin, 0.04), evals
    assert final["eval_loss"] < evals[0]["eval_loss"] - 2.0
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(out), device="cpu")
    assert len(fill("the [MASK] of the house.")) == 5
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluation_is_the_same_whatever_the_batch_size_and_the_ranks(data128):
    """Identical weights, batches of 8, 16 and 32, on 1 and on 2 ranks (each rank's share evaluated, the
    totals summed as the all-reduce does): the same rows, targets and loss to float tolerance. The rows
    are a stratified sample spread over the whole split, the same for every --seed."""
    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.data import eval_rows, load_data
    from pipeline.consumers.training.evaluation import evaluate
    from pipeline.consumers.training.models import build_model
    from pipeline.consumers.training.ranks import Ranks

    data = load_data(TrainConfig(data=str(data128), output="unused"), Ranks())
    n = len(data.validation)
    # 20 rows (batches of 8 end on a partial one), fewer on the embedded sample's 30 validation rows
    cfg = TrainConfig(data=str(data128), output="unused", eval_rows=min(20, n // 3))
    assert cfg.eval_rows >= 10, n
    rows = eval_rows(n, cfg.eval_rows)
    assert len(set(rows.tolist())) == cfg.eval_rows  # every stratum:
    assert rows.min() < n / cfg.eval_rows and rows.max() >= n - n / cfg.eval_rows
    torch.manual_seed(0)
    model = build_model(data.spec, data.seq_len, torch.device("cpu"))
    results = {}
    for batch_size in (8, 16, 32):
        for world in (1, 2):
            totals: list[list[float]] = []
            for rank in range(world):
                share = data.validation_batches(TrainConfig(**{**vars(cfg), "batch_size": batch_size,
                                                               "seed": rank + 7}), Ranks(rank, world))
                evaluate(model, share, torch.device("cpu"), lambda values, into=totals: into.append(values) or values)
            loss, correct, targets, stopped = np.sum(totals, axis=0)
            results[batch_size, world] = (loss / targets, int(targets))
    losses, targets = zip(*results.values())
    assert len(set(targets)) == 1 and targets[0] > cfg.eval_rows, results
    np.testing.assert_allclose(losses, losses[0], rtol=1e-6, err_msg=str(results))


def _stop_when(proc: subprocess.Popen, folder, min_step: int, sig: int, pids=None) -> None:
    """Send `sig` (to `pids`, default the process) once the run logged step `min_step`."""
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        rows = _metrics(folder) if (folder / "metrics.jsonl").exists() else []
        if any(r.get("step", 0) >= min_step and "loss" in r for r in rows):
            break
        time.sleep(0.02)
    for pid in (pids() if pids else [proc.pid]):
        os.kill(pid, sig)


@pytest.fixture(scope="module")
def full_run(data128, tmp_path_factory):
    """An uninterrupted 20-step run (in this process), shared by the interrupt and the refusal tests."""
    from jobs.train import run

    out = tmp_path_factory.mktemp("full") / "run"
    run(["--data", str(data128), *_KILL_ARGS, "--output", str(out)])
    return out


_KILL_ARGS = ["--config", "tiny", "--max_steps", "20", "--batch_size", "8", "--save_every", "10", "--warmup_steps",
              "10", "--eval_rows", "16"]


def test_ctrl_c_saves_at_the_step_boundary_and_resumes_to_the_same_losses(data128, full_run, tmp_path, caplog):
    """Ctrl-C (SIGINT) mid-run: one line naming the step and the --resume command, exit 130, no
    traceback, a checkpoint at that step (not the last --save_every one); the resumed run logs the same
    losses as the uninterrupted one."""
    import logging

    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    env = dict(os.environ, PYTHONPATH=str(REPO))
    killed = tmp_path / "killed"
    # every step's row at once (the watcher reads them; rows every 10 steps would land the signal on a
    # --save_every boundary); the resumed run logs every 10 steps again
    proc = subprocess.Popen([sys.executable, "-m", "jobs.train", "--data", str(data128), *_KILL_ARGS, "--output",
                             str(killed), "--log_every", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _stop_when(proc, killed, 13, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    stopped = [line for line in err.splitlines() if "stopped by" in line]
    assert len(stopped) == 1, err
    step = int(re.search(r"stopped by SIGINT at step (\d+) of 20, checkpoint saved; continue with: python -m "
                         r"jobs.train .* --resume$", stopped[0]).group(1))
    acknowledged = re.findall(r"^jobs.train: SIGINT: stopping after step (\d+) \(then exit 130; another SIGINT "
                              r"stops at once without saving\)$", err, re.M)
    assert acknowledged == [str(step)], err  # at once, naming the step it stops after
    assert 13 <= step < 20 and step % 10, step  # a boundary past the last --save_every checkpoint
    assert load_checkpoint(str(killed / "checkpoint.pt"))["step"] == step
    assert sorted(os.listdir(killed)) == ["checkpoint.pt", "metrics.jsonl", "train.log", "train_config.json"]
    with caplog.at_level(logging.INFO, logger="maskbeam"):
        run(["--data", str(data128), *_KILL_ARGS, "--output", str(killed), "--resume"])
    assert f"resumed at step {step} (epoch 0, sample {8 * step}) from 1 ranks onto 1" in caplog.text
    # not a terminal: progress goes to the log every --log_every (10) steps, and each evaluation
    progress = re.findall(r"step (\d+)/20  loss \d+\.\d+  lr \S+  tokens/s [\d,]+  ETA \d+:\d\d", caplog.text)
    assert [int(s) for s in progress] == [s for s in range(10, 21, 10) if s > step]
    assert "eval at step 20: " in caplog.text and f"saved the model and its tokenizer to {killed}" in caplog.text
    losses = lambda rows: [(r["step"], r["loss"]) for r in rows if "loss" in r]  # noqa: E731
    a, b = losses(_metrics(full_run)), losses(_metrics(killed))
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 21))
    np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=1e-5)


def test_kill_9_with_the_defaults_then_resume_continues(data128, full_run, tmp_path, caplog):
    """kill -9 of a run with the default saving (every 500 steps or 30 minutes) before its first
    checkpoint: --resume starts it again (it used to say there was nothing to resume and refuse a rerun);
    with --save_minutes short, kill -9 leaves a time-based checkpoint and --resume continues from it.
    Both end with the uninterrupted run's losses."""
    import logging

    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    at = _KILL_ARGS.index("--save_every")
    defaults = _KILL_ARGS[:at] + _KILL_ARGS[at + 2:]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    losses = lambda rows: [(r["step"], r["loss"]) for r in rows if "loss" in r]  # noqa: E731
    expected = losses(_metrics(full_run))
    for extra, kill_at in (([], 5), (["--save_minutes", "0.002"], 12)):
        out = tmp_path / ("timed" if extra else "defaults")
        argv = ["--data", str(data128), *defaults, *extra, "--output", str(out)]
        proc = subprocess.Popen([sys.executable, "-m", "jobs.train", *argv], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _stop_when(proc, out, kill_at, signal.SIGKILL)
        proc.wait(timeout=300)
        saved = load_checkpoint(str(out / "checkpoint.pt"))["step"] if (out / "checkpoint.pt").exists() else 0
        assert (saved == 0) if not extra else (1 <= saved <= 20), saved
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="maskbeam"):
            run([*argv, "--resume"])
        assert ("saved no checkpoint" if not extra else f"resumed at step {saved} ") in caplog.text
        assert [s for s, _ in losses(_metrics(out))] == list(range(1, 21))
        np.testing.assert_allclose([v for _, v in losses(_metrics(out))], [v for _, v in expected], rtol=1e-5)


def test_ctrl_c_at_start_up_is_acknowledged_at_once_and_skips_the_evaluation(data128, tmp_path):
    """Ctrl-C while the data and the model load: one line at once ("stopping before the first step"),
    no evaluation, exit 130 and a folder the same command starts again (it used to be silent, run the
    step-0 evaluation and only then stop)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.train", "--data", str(data128), *_KILL_ARGS, "--eval_rows",
                             "0", "--output", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 300
    while not (out / "train.log").exists() and time.time() < deadline:  # the stop handlers are in place
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    sent = time.time()
    first = proc.stderr.readline()
    acknowledged = time.time() - sent
    err = first + proc.stderr.read()
    assert proc.wait(timeout=300) == 130, err
    assert first.startswith("jobs.train: SIGINT: stopping before the first step"), err
    assert acknowledged < 10, acknowledged  # a handler's line; only a long call into C delays it
    assert "eval at step" not in err and "Traceback" not in err, err
    assert "stopped by SIGINT before the first step, nothing saved; the same command starts the run again" in err
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text()


def test_sigterm_during_an_evaluation_stops_it_at_once_and_saves_the_step(data128, tmp_path):
    """SIGTERM while an --eval_every evaluation runs: the run says "stopping after step N" at once,
    abandons the evaluation (no eval row of step N), saves the checkpoint of step N, prints the --resume
    line and exits 143; --resume continues from it to the end. The signal is made to land inside the
    evaluation: the run is frozen (SIGSTOP) as soon as the rows of step N appear (written just before its
    evaluation), and the signal sent while it is frozen when its evaluation row has not appeared yet."""
    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "run"
    argv = ["--data", str(data128), "--output", str(out), "--config", "tiny", "--max_steps", "8", "--batch_size",
            "8", "--warmup_steps", "2", "--eval_every", "2", "--eval_rows", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "jobs.train", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    stopped_at, deadline = None, time.time() + 300
    for step in (2, 4, 6):  # the evaluations before the last step; each is preceded by its rows
        while proc.poll() is None and time.time() < deadline:
            rows = _metrics(out) if (out / "metrics.jsonl").exists() else []
            if any(r["step"] == step and "loss" in r for r in rows):
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)
        if not any(r["step"] == step and "eval_loss" in r for r in _metrics(out)):  # frozen inside it
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)
            stopped_at = step
            break
        os.kill(proc.pid, signal.SIGCONT)  # the evaluation was done already: the next one
    err = proc.communicate(timeout=300)[1]
    assert stopped_at is not None and proc.returncode == 143, err
    assert re.search(rf"^jobs.train: SIGTERM: stopping after step {stopped_at}(, abandoning the evaluation)? \(then "
                     r"exit 143", err, re.M), err
    assert re.search(rf"stopped by SIGTERM at step {stopped_at} of 8, checkpoint saved; continue with: .* --resume$",
                     err, re.M), err
    assert "Traceback" not in err, err
    assert not any(r["step"] == stopped_at and "eval_loss" in r for r in _metrics(out))
    assert load_checkpoint(str(out / "checkpoint.pt"))["step"] == stopped_at
    final = run([*argv, "--resume", "--eval_every", "0", "--eval_rows", "16"])  # the final evaluation only
    assert [r["step"] for r in _metrics(out) if "loss" in r] == list(range(1, 9)) and "eval_loss" in final


def test_an_epochs_run_keeps_its_schedule_when_a_resume_changes_the_rows_per_step(one_book, tmp_path, caplog):
    """--epochs 1 on batches of 8, stopped (SIGINT) at step 5 or after, resumed on batches of 16 (as
    another world size changes the rows per step): the run keeps the step total counted at its start, so
    the rate continues its schedule (it used to be recounted, the rate jumping) and ends at 0."""
    import logging
    import threading

    from jobs.train import run
    from pipeline.consumers.loading import MlmShardDataset
    from pipeline.consumers.training.checkpoints import load_checkpoint
    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.schedule import lr_at

    out = tmp_path / "run"
    argv = ["--data", str(one_book), "--output", str(out), "--config", "tiny", "--epochs", "1", "--warmup_steps", "2",
            "--eval_rows", "4", "--log_every", "1"]  # each step's row at once: the watcher reads them

    def interrupt_at(step: int) -> None:
        deadline = time.time() + 300
        while time.time() < deadline:
            rows = _metrics(out) if (out / "metrics.jsonl").exists() else []
            if any(r.get("step", 0) >= step and "loss" in r for r in rows):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=interrupt_at, args=(5,), daemon=True)
    watcher.start()
    with pytest.raises(SystemExit) as stopped:
        run([*argv, "--batch_size", "8"])
    watcher.join()
    assert stopped.value.code == 130
    with caplog.at_level(logging.INFO, logger="maskbeam"):
        run([*argv, "--batch_size", "16", "--resume"])
    rows = [r for r in _metrics(out) if "loss" in r]
    total = load_checkpoint(str(out / "checkpoint.pt"))["total_steps"]
    assert total == len(MlmShardDataset(str(one_book))) // 8  # counted at the start: batches of 8
    cfg = TrainConfig(lr=5e-4, warmup_steps=2)
    assert [r["step"] for r in rows] == list(range(1, total + 1)), total
    np.testing.assert_allclose([r["lr"] for r in rows], [lr_at(s, cfg, total) for s in range(1, total + 1)],
                               rtol=1e-6)
    assert f"the run keeps the {total} steps counted at its start" in caplog.text


def test_run_folders_are_never_replaced_or_faked(data128, full_run, tmp_path, caplog, capsys):
    """An existing run is refused without --resume/--overwrite; --resume needs a checkpoint; --overwrite
    replaces only a jobs.train folder; a crafted checkpoint is refused unrun (issue 26.1); a warmup
    longer than the run is clipped with a warning."""
    import hashlib
    import shutil

    from jobs.train import run

    base = ["--data", str(data128), "--config", "tiny", "--batch_size", "8", "--eval_rows", "8"]
    digest = lambda: hashlib.sha256((full_run / "model.safetensors").read_bytes()).hexdigest()  # noqa: E731
    before = digest()
    with pytest.raises(SystemExit, match="already holds a jobs.train run: pass --resume to continue it, --overwrite"):
        run([*base, "--output", str(full_run), "--max_steps", "2"])
    assert digest() == before and len(_metrics(full_run)) > 20
    with pytest.raises(SystemExit, match="has no checkpoint.pt, there is nothing to resume"):
        run([*base, "--output", str(tmp_path / "new"), "--resume"])
    assert not (tmp_path / "new").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not a jobs.train run folder .* refusing to delete it"):
        run([*base, "--output", str(foreign), "--overwrite"])
    assert (foreign / "notes.txt").read_text() == "mine"

    copy = tmp_path / "copy"
    shutil.copytree(full_run, copy)
    marker = tmp_path / "pwned"

    class RunsACommand:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"model": {}, "optimizer": {}, "step": 40, "x": RunsACommand()}, copy / "checkpoint.pt")
    with pytest.raises(SystemExit, match="holds more than tensors and plain data, refusing to load it"):
        run([*base, "--output", str(copy), "--resume", "--max_steps", "41"])
    assert not marker.exists()
    assert (copy / "model.safetensors").exists()  # a failed resume deletes nothing

    with caplog.at_level("WARNING", logger="maskbeam"):
        run([*base, "--output", str(copy), "--overwrite", "--max_steps", "2"])  # default --warmup_steps 100
    assert "--warmup_steps 100 is longer than the run's 2 steps: warming up over 1 steps instead" in caplog.text
    assert "Writing model shards" not in capsys.readouterr().err  # no progress bars in a log that is not a terminal
    rows = [r for r in _metrics(copy) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2] and max(r["lr"] for r in rows) == pytest.approx(5e-4)


def _tiny_bert(vocab_size):
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=128))


def _hf_rows(data, n: int):
    """The first `n` training rows of an output as a `datasets.Dataset` (HF Trainer's full MLM head
    projects every position onto the 30,522 ids: 32-token rows keep its steps short on a CPU)."""
    import datasets

    return datasets.load_from_disk(str(data))[m.TRAIN].select(range(n))


def test_hf_trainer_static_with_default_collator(tmp_path):
    from transformers import Trainer, TrainingArguments, default_data_collator

    data = tmp_path / "static"
    run_preprocess([SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"], data, "--max_seq_length", "32", "--min_tokens",
                   "8")
    train = _hf_rows(data, 64)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, max_steps=6,
                             report_to=[], use_cpu=True, logging_steps=1, save_strategy="no")
    trainer = Trainer(model=_tiny_bert(30522), args=args, train_dataset=train, data_collator=default_data_collator)
    result = trainer.train()
    assert np.isfinite(result.training_loss) and result.global_step == 6


def test_hf_trainer_dynamic_with_our_collator_is_epoch_aware(one_book, tmp_path):
    from transformers import Trainer, TrainingArguments

    from pipeline.consumers.loading import MlmCollator, epoch_callback

    train = _hf_rows(one_book, 32)
    collator = MlmCollator.for_output(str(one_book))
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


def test_model_vocabulary_must_match_the_data_and_a_failed_run_leaves_only_its_log(data128, tmp_path):
    from jobs.train import run

    _tiny_bert(1000).save_pretrained(tmp_path / "small_vocab")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="vocabulary of 1000 ids but the data was tokenized with 30522"):
        run(["--data", str(data128), "--output", str(out), "--model", str(tmp_path / "small_vocab")])
    assert os.listdir(out) == ["train.log"]
    assert "the run failed before its first checkpoint (model" in (out / "train.log").read_text()
    with pytest.raises(SystemExit, match="vocabulary of 1000 ids"):  # a folder holding only a log is free to use
        run(["--data", str(data128), "--output", str(out), "--model", str(tmp_path / "small_vocab")])


def test_flags_keep_the_config_defaults(data128):
    from jobs.train import parse
    from pipeline.consumers.training.config import TrainConfig

    cfg = parse(["--data", str(data128), "--output", "unused"])
    assert cfg.trim_padding is TrainConfig.trim_padding is True and cfg.compile is False
    cfg = parse(["--data", str(data128), "--output", "unused", "--no_trim_padding", "--compile"])
    assert cfg.trim_padding is False and cfg.compile is True
    assert cfg.read_mode == "pread"
    with pytest.raises(SystemExit):
        parse(["--data", str(data128), "--output", "unused", "--read_mode", "direct"])
    cfg = parse(["--data", str(data128), "--output", "unused"])
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.adam_epsilon, cfg.min_lr_ratio) == (0.9, 0.999, 1e-8, 0.0)
    assert cfg.hidden_dropout is cfg.attention_dropout is None and cfg.report_to == "none"
    assert cfg.save_pretrained_every == 0 and cfg.gradient_checkpointing is False


@pytest.mark.parametrize("flags, message", [
    (["--adam_beta2", "1"], "--adam_beta2 must be in [0, 1), got 1.0"),
    (["--adam_epsilon", "0"], "--adam_epsilon must be > 0"),
    (["--hidden_dropout", "-0.1"], "--hidden_dropout must be in [0, 1)"),
    (["--min_lr_ratio", "1.5"], "--min_lr_ratio must be in [0, 1]"),
    (["--save_pretrained_every", "-1"], "--save_pretrained_every must be >= 0"),
    (["--report_to", "tensorboard,mlflow"], "--report_to 'mlflow': choose tensorboard, wandb"),
])
def test_hf_style_flags_are_checked_in_one_line(data128, capsys, flags, message):
    from jobs.train import parse

    with pytest.raises(SystemExit):
        parse(["--data", str(data128), "--output", "unused", *flags])
    assert message in capsys.readouterr().err


def test_every_flag_has_help_with_its_default():
    from jobs.train import parser

    actions = [a for a in parser()._actions if a.option_strings != ["-h", "--help"]]
    assert len(actions) >= 30
    for action in actions:
        assert action.help and len(action.help) > 15, action.option_strings
        if action.dest not in ("data", "output"):
            assert "default" in action.help, action.option_strings  # once: see test_messages
    text = parser().format_help()
    assert "--config {tiny,mini,small,base}" in text and "--arch {bert,roberta" in text
    assert "torchrun --nproc_per_node 2 -m jobs.train" in text


@pytest.mark.parametrize("persistent", [False, True])
def test_hf_trainer_dynamic_masks_follow_the_epoch_in_workers_and_across_a_resume(one_book, tmp_path, persistent):
    """2 DataLoader workers (the collate runs in them), persistent or not; 2 epochs of 4 steps; then a
    resume from the checkpoint at step 6 (epoch 1.5: `round` made it epoch 2). Every batch the model sees must be masked with
    (mask_seed, epoch of that step)."""
    from transformers import Trainer, TrainingArguments

    from pipeline.consumers.loading import MlmCollator, epoch_callback
    from pipeline.kernels.rows.masking import mask_rows

    train = _hf_rows(one_book, 32)
    ids = np.asarray(train["input_ids"], dtype=np.int32)
    seeds = np.asarray(train["mask_seed"], dtype=np.uint64)
    rule = MlmCollator.for_output(str(one_book)).rule
    row_of = {row.tobytes(): i for i, row in enumerate(ids)}
    assert len(row_of) == len(ids)  # a row names itself by its ids

    def run(resume_from=None):
        collator = MlmCollator.for_output(str(one_book))
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


def test_two_epochs_with_dataloader_workers(one_book, tmp_path):
    """jobs.train with 2 DataLoader workers (compact batches widened on the device) over 2 epochs,
    reading rows through memory maps (the other runs use the default, pread): every step of both
    epochs runs, and the saved sampler state is at the end of epoch 1."""
    from jobs.train import run
    from pipeline.consumers.loading import MlmShardDataset
    from pipeline.consumers.training.checkpoints import load_checkpoint

    out = tmp_path / "model"
    per_epoch = len(MlmShardDataset(str(one_book))) // 64
    final = run(["--data", str(one_book), "--output", str(out), "--config", "tiny", "--epochs", "2",
                 "--batch_size", "64", "--num_workers", "2", "--eval_rows", "64", "--warmup_steps", "2",
                 "--read_mode", "mmap"])
    steps = [r["step"] for r in _metrics(out) if "loss" in r]
    assert per_epoch >= 2 and steps == list(range(1, 2 * per_epoch + 1))
    assert np.isfinite(final["eval_loss"])
    state = load_checkpoint(str(out / "checkpoint.pt"))["sampler"]
    assert state["epoch"] == 1 and state["position"] == per_epoch * 64
    assert json.load(open(out / "train_config.json"))["read_mode"] == "mmap"


def _device_reads_and_control_sums(data, out, steps: int) -> tuple[int, int]:
    """(tensor -> Python conversions made by the training package's own code, control all-reduces
    `Ranks.sum`) during a run of `steps` steps that logs once (--log_every steps)."""
    import functools

    from jobs.train import run
    from pipeline.consumers.training import ranks as ranks_module

    package = os.path.dirname(ranks_module.__file__)
    counts = {"reads": 0, "sums": 0}
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__int__", "__float__", "cpu")}

    def counted(name):
        original = originals[name]

        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(package):
                counts["reads"] += 1
            return original(self, *args, **kwargs)
        return wrapper

    original_sum = ranks_module.Ranks.sum

    def counted_sum(self, values):
        counts["sums"] += 1
        return original_sum(self, values)

    try:
        for name in originals:
            setattr(torch.Tensor, name, counted(name))
        ranks_module.Ranks.sum = counted_sum
        run(["--data", str(data), "--output", str(out), "--config", "tiny", "--max_steps", str(steps),
             "--batch_size", "8", "--log_every", str(steps), "--save_every", "0", "--save_minutes", "0",
             "--eval_rows", "16", "--warmup_steps", "2"])
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        ranks_module.Ranks.sum = original_sum
    return counts["reads"], counts["sums"]


def test_a_step_reads_nothing_back_from_the_device(data128, tmp_path):
    """Between logging steps a step leaves its loss and gradient norm on the device and makes one
    control all-reduce (its target and token counts, the stop requests): 20 steps make no more
    tensor reads than 10, and 10 more control sums. The target counts come from the collator; the
    row of every step is still written, with its loss and gradient norm."""
    reads10, sums10 = _device_reads_and_control_sums(data128, tmp_path / "ten", 10)
    reads20, sums20 = _device_reads_and_control_sums(data128, tmp_path / "twenty", 20)
    assert reads20 == reads10, (reads10, reads20)  # was 3 more per step (.item() of the loss, 2 target sums)
    assert sums20 - sums10 == 10, (sums10, sums20)  # was 2 per step
    rows = [r for r in _metrics(tmp_path / "twenty") if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert all(np.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in rows)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precisions_train_and_resume_on_the_cpu(data128, tmp_path, precision):
    """--precision fp16 (a loss scaler, saved in the checkpoint) and bf16 run the trainer's autocast
    path on the CPU; the loss is finite and falls as in fp32; --max_grad_norm 0 turns clipping off
    while the norm is still logged."""
    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    out = tmp_path / precision
    args = ["--data", str(data128), "--output", str(out), "--config", "tiny", "--batch_size", "8", "--lr", "3e-3",
            "--warmup_steps", "2", "--eval_rows", "16", "--precision", precision, "--max_grad_norm", "0"]
    run([*args, "--max_steps", "6"])
    scaler = load_checkpoint(str(out / "checkpoint.pt"))["scaler"]
    assert bool(scaler) == (precision == "fp16")  # the scale and its growth tracker
    run([*args, "--max_steps", "12", "--resume"])
    rows = [r for r in _metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert all(np.isfinite(r["loss"]) and np.isfinite(r["grad_norm"]) for r in rows)
    assert any(r["grad_norm"] > 1.0 for r in rows)  # not clipped to 1 (the default)
    assert np.mean([r["loss"] for r in rows[-3:]]) < np.mean([r["loss"] for r in rows[:3]])
    assert f"device cpu, {precision}" in (out / "train.log").read_text()


def test_token_and_time_budgets_end_the_run_saved_and_evaluated(data128, tmp_path):
    """--max_tokens ends the run after the step that reaches it (the count kept in the checkpoint
    across a resume); --max_minutes after the step during which the time ran out; both with the
    checkpoint, the final evaluation and the saved model, as a run at its last step."""
    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    out = tmp_path / "tokens"
    args = ["--data", str(data128), "--output", str(out), "--config", "tiny", "--batch_size", "8",
            "--max_steps", "40", "--warmup_steps", "2", "--eval_rows", "16"]
    first = run([*args, "--max_steps", "1"])
    per_step = load_checkpoint(str(out / "checkpoint.pt"))["tokens"]
    assert 0 < per_step <= 8 * 128 and "eval_loss" in first
    final = run([*args, "--max_tokens", str(3 * per_step), "--resume"])
    ckpt = load_checkpoint(str(out / "checkpoint.pt"))
    rows = [r for r in _metrics(out) if "loss" in r]
    assert 2 <= ckpt["step"] <= 4 and [r["step"] for r in rows] == list(range(1, ckpt["step"] + 1))
    assert ckpt["tokens"] >= 3 * per_step and "eval_loss" in final and (out / "config.json").is_file()
    assert "--max_tokens" in (out / "train.log").read_text()
    with pytest.raises(SystemExit, match="the run is complete: it trained on .* tokens, --max_tokens"):
        run([*args, "--max_tokens", str(3 * per_step), "--resume"])
    timed = tmp_path / "minutes"
    final = run([*args[:3], str(timed), *args[4:], "--max_minutes", "0.0001"])
    assert load_checkpoint(str(timed / "checkpoint.pt"))["step"] <= 2  # out of time before step 1 or during it
    assert "eval_loss" in final and "--max_minutes 0.0001 reached" in (timed / "train.log").read_text()


def _wandb_history(folder) -> list[dict]:
    """The history rows of the offline W&B runs under `folder`, read from their .wandb files (a
    leveldb-style log of protobuf records: 32 KiB blocks of records with a 7-byte header each)."""
    import glob
    import struct

    from wandb.proto import wandb_internal_pb2

    rows = []
    for path in sorted(glob.glob(str(folder / "offline-run-*" / "run-*.wandb"))):  # not latest-run, a link
        data, pos, pending, records = open(path, "rb").read(), 7, b"", []  # after the file's own 7-byte header
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
            if left < 7 or kind == 0:
                pos += left
                continue
            chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
            pending = chunk if kind in (1, 2) else pending + chunk
            if kind in (1, 4):
                records.append(pending)
        for raw in records:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def test_hf_exports_reports_optimizer_dropout_and_checkpointing_flags(data128, tmp_path, monkeypatch):
    """One 3-step run with the HF Trainer-style flags: checkpoint-STEP/ exports every step that
    from_pretrained loads (the newest --save_total_limit 2 kept, the last one the final model);
    TensorBoard events (and W&B offline, when installed) holding metrics.jsonl's losses and evaluations;
    the AdamW betas and epsilon in the checkpoint's optimizer state; the dropouts in the saved config;
    gradient checkpointing on; the linear decay ending at --min_lr_ratio of the peak."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForMaskedLM

    from jobs.train import run
    from pipeline.consumers.training.checkpoints import load_checkpoint

    wandb = "wandb" if __import__("importlib").util.find_spec("wandb") else None
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    run(["--data", str(data128), "--output", str(out), "--config", "tiny", "--batch_size", "8", "--max_steps", "3",
         "--warmup_steps", "1", "--lr", "1e-3", "--min_lr_ratio", "0.5", "--eval_rows", "16", "--adam_beta1", "0.85",
         "--adam_beta2", "0.99", "--adam_epsilon", "1e-7", "--hidden_dropout", "0.05", "--attention_dropout", "0",
         "--gradient_checkpointing", "--save_pretrained_every", "1", "--save_total_limit", "2",
         "--report_to", ",".join(filter(None, ["tensorboard", wandb]))])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    final = AutoModelForMaskedLM.from_pretrained(str(out))
    exported = {step: AutoModelForMaskedLM.from_pretrained(str(out / f"checkpoint-{step}")) for step in (2, 3)}
    weights = lambda model: torch.cat([p.detach().flatten() for p in model.parameters()])  # noqa: E731
    assert torch.equal(weights(exported[3]), weights(final))
    assert not torch.equal(weights(exported[2]), weights(final))
    assert (out / "checkpoint-3" / "tokenizer.json").is_file()
    assert final.config.hidden_dropout_prob == 0.05 and final.config.attention_probs_dropout_prob == 0.0
    ckpt = load_checkpoint(str(out / "checkpoint.pt"))
    group = ckpt["optimizer"]["param_groups"][0]
    assert tuple(group["betas"]) == (0.85, 0.99) and group["eps"] == 1e-7
    assert ckpt["config"]["gradient_checkpointing"] is True
    rows = _metrics(out)
    steps = [r for r in rows if "loss" in r]
    assert steps[-1]["lr"] == pytest.approx(0.5e-3) and steps[0]["lr"] == pytest.approx(1e-3)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert [s for s, _ in loss] == [1, 2, 3]
    np.testing.assert_allclose([v for _, v in loss], [r["loss"] for r in steps], rtol=1e-6)
    evals = [r for r in rows if "eval_loss" in r]
    assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars("eval/loss")] == \
        [(r["step"], r["eval_loss"]) for r in evals]
    assert {"train/lr", "train/grad_norm", "eval/accuracy"} <= set(events.Tags()["scalars"])
    if wandb:
        history = _wandb_history(out / "wandb")
        assert [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h] == \
            [(r["step"], pytest.approx(r["loss"])) for r in steps]
