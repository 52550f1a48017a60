"""The trainer's helpers: the gathered MLM head gives every family's full-head loss and gradients,
new models of every family fit the data's tokenizer, and checkpoints load as data only."""

from __future__ import annotations

import os
import pickle
import time

import pytest
import torch

from pipeline.consumers.training.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from pipeline.consumers.training.loss import mlm_loss
from pipeline.consumers.training.models import ARCHITECTURES, build_model, check_vocabulary


def _model_and_batch(spec, arch: str = "bert", seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(spec, 64, torch.device("cpu"), arch=arch, size="tiny").eval()  # eval: no dropout
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, spec.vocab_size, (6, 64), generator=generator)
    attention = torch.ones_like(ids)
    attention[2, 40:] = 0  # a padded row
    ids[2, 40:] = spec.pad_id
    labels = torch.full_like(ids, -100)
    selected = (torch.rand(ids.shape, generator=generator) < 0.15) & attention.bool()
    selected[3] = False  # a row without targets
    labels[selected] = ids[selected]
    return model, {"input_ids": ids, "attention_mask": attention, "labels": labels}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_gathered_head_gives_the_full_heads_loss_and_gradients(spec, arch):
    model, batch = _model_and_batch(spec, arch)
    assert model.config.model_type == arch and model.config.vocab_size == spec.vocab_size
    assert model.config.pad_token_id == spec.pad_id
    full = model(**batch).loss
    full.backward()
    full_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    gathered = mlm_loss(model, batch)
    gathered.backward()
    torch.testing.assert_close(gathered, full, rtol=1e-5, atol=1e-6)
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == full_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, full_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_batch_without_targets_gives_zero_and_still_backpropagates(spec):
    model, batch = _model_and_batch(spec, seed=1)
    batch["labels"][:] = -100
    loss = mlm_loss(model, batch)
    loss.backward()
    assert loss.item() == 0.0


def test_a_model_folder_with_another_tokenizer_is_refused(spec, tmp_path):
    """Same vocabulary size, other tokens: the sizes alone would let a model train on ids that mean
    other words to it."""
    import json

    from transformers import AutoConfig

    config = AutoConfig.for_model("bert", vocab_size=spec.vocab_size, pad_token_id=spec.pad_id)
    swapped = json.loads(spec.json)
    vocab = swapped["model"]["vocab"]
    a, b = "the", "house"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "tokenizer.json").write_text(json.dumps(swapped))
    with pytest.raises(ValueError, match="another tokenizer than the data: 2 tokens differ"):
        check_vocabulary(str(tmp_path), config, spec)
    (tmp_path / "tokenizer.json").write_text(spec.json)
    check_vocabulary(str(tmp_path), config, spec)  # the data's own tokenizer passes


class _RunsACommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused_unrun(tmp_path):
    """Issue 26.1: torch.load(weights_only=False) ran the pickle's os.system; the restricted loader
    refuses it and nothing runs. A real checkpoint (tensors, optimizer, numpy numbers) loads."""
    marker = tmp_path / "pwned"
    crafted = tmp_path / "checkpoint.pt"
    torch.save({"model": {}, "optimizer": {}, "step": 3, "payload": _RunsACommand(str(marker))}, crafted)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="holds more than tensors and plain data, refusing to load it"):
        load_checkpoint(str(crafted))
    assert not marker.exists()
    crafted.write_bytes(pickle.dumps({"model": {}}))  # not even a torch file
    with pytest.raises(CheckpointError):
        load_checkpoint(str(crafted))

    import numpy as np

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    real = tmp_path / "real.pt"
    save_checkpoint(str(real), {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1,
                                "sampler": {"global_position": np.int64(96)}, "rng": {"torch": torch.get_rng_state()}})
    state = load_checkpoint(str(real))
    assert state["sampler"]["global_position"] == 96 and torch.equal(state["model"]["weight"], model.weight)


@pytest.mark.parametrize("arch", ["bert", "modernbert", "distilbert"])
def test_weight_decay_spares_biases_and_layer_norms(spec, arch):
    """As HF Trainer's groups: every bias and every LayerNorm parameter undecayed, every other weight
    (embeddings, projections) decayed; each parameter in exactly one group."""
    from pipeline.consumers.training.optimizer import decay_groups

    model = build_model(spec, 64, torch.device("cpu"), arch=arch, size="tiny")
    decayed, spared = decay_groups(model, 0.01)
    assert decayed["weight_decay"] == 0.01 and spared["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    spared_names = {names[id(p)] for p in spared["params"]}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    assert spared_names | decayed_names == set(names.values()) and not spared_names & decayed_names
    norms = {f"{m}.{n}" if m else n for m, module in model.named_modules() if isinstance(module, torch.nn.LayerNorm)
             for n, _ in module.named_parameters(recurse=False)}
    biases = {n for n in names.values() if n.endswith("bias")}
    assert norms and spared_names == (norms | biases) & set(names.values())
    assert any("embeddings" in n for n in decayed_names) and all(p.dim() >= 2 for p in decayed["params"])


def test_an_evaluation_stops_at_once_on_a_stop_request(spec):
    """A stop request during an evaluation: no batch after it is evaluated, and the result is None
    (abandoned, never logged as a loss of fewer rows)."""
    from pipeline.consumers.training.evaluation import evaluate

    model, batch = _model_and_batch(spec)
    seen = []

    def batches():
        for i in range(10):
            seen.append(i)
            yield batch

    assert evaluate(model, batches(), torch.device("cpu"), should_stop=lambda: len(seen) > 2) is None
    assert seen == [0, 1, 2]
    assert evaluate(model, [batch], torch.device("cpu"))["eval_targets"] == int((batch["labels"] != -100).sum())


def test_checkpoints_beyond_the_total_limit_are_removed(tmp_path):
    """keep=3: checkpoint.pt is the newest, the two before it stay as checkpoint-STEP.pt, older ones go;
    keep=1 leaves checkpoint.pt alone."""
    path = str(tmp_path / "checkpoint.pt")
    previous = None
    for step in (10, 20, 30, 40):
        save_checkpoint(path, {"model": {}, "optimizer": {}, "step": step}, keep=3, previous_step=previous)
        previous = step
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-20.pt", "checkpoint-30.pt", "checkpoint.pt"]
    assert load_checkpoint(path)["step"] == 40 and load_checkpoint(str(tmp_path / "checkpoint-30.pt"))["step"] == 30
    save_checkpoint(path, {"model": {}, "optimizer": {}, "step": 50}, keep=1, previous_step=40)
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_peak_flops_take_the_longest_device_name_fragment():
    from pipeline.consumers.training.mfu import peak_flops_of

    assert peak_flops_of("NVIDIA L40S") == 362e12
    assert peak_flops_of("NVIDIA L40") == 181e12  # matched "L4" (121e12) before
    assert peak_flops_of("NVIDIA L4") == 121e12
    assert peak_flops_of("NVIDIA H200") == 989e12
    assert peak_flops_of("Some Other GPU") is None


def test_a_local_rank_takes_the_only_gpu_a_scheduler_shows_it():
    from pipeline.consumers.training.ranks import cuda_index

    assert cuda_index(3, 1) == 0  # one GPU per task: cuda:3 does not exist there
    assert [cuda_index(r, 4) for r in range(4)] == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="local rank 4 has no GPU of its own: 4 visible"):
        cuda_index(4, 4)


def test_an_unavailable_attention_falls_back_to_sdpa_before_eager(spec):
    """flash-attn is not installed here: asking for it fails in transformers for real, and the model
    comes with sdpa (it fell back to eager, the slowest)."""
    from transformers import AutoModelForMaskedLM

    from pipeline.consumers.training.models import scratch_config, with_attention_fallback

    config = scratch_config("modernbert", "tiny", spec, 64)
    tried = []

    def load(attempt):
        tried.append(attempt)
        return AutoModelForMaskedLM.from_config(config, attn_implementation=attempt)

    model = with_attention_fallback(load, "flash_attention_2", "modernbert")
    assert tried == ["flash_attention_2", "sdpa"]
    assert model.config._attn_implementation == "sdpa"


def test_the_collator_finds_the_target_positions_and_tokens_in_the_worker(spec):
    """The step's batch carries the flat target positions and the real-token count, found on the CPU
    (in the DataLoader worker): the gathered head selects with them (`index_select`, no GPU->CPU
    sync), giving exactly the logits of the boolean mask `hidden[labels != -100]`."""
    import numpy as np

    from pipeline.consumers.loading import MlmCollator
    from pipeline.consumers.training.batches import TARGETS_AT, TOKENS, StepCollator, targets_of, to_device
    from pipeline.consumers.training.loss import target_logits

    model, batch = _model_and_batch(spec, seed=2)
    rows = {k: v.numpy().astype(np.int16 if k != "attention_mask" else np.int8) for k, v in batch.items()}
    out = StepCollator(MlmCollator(compact=True))(rows)
    assert out["labels"].dtype == torch.int16  # still the compact batch a worker ships
    expected = (batch["labels"].reshape(-1) != -100).nonzero().flatten()
    assert out[TARGETS_AT].dtype == torch.int64 and torch.equal(out[TARGETS_AT], expected)
    assert out[TOKENS] == int(batch["attention_mask"].sum()) and targets_of(out) == expected.numel()
    on_device = to_device(out, torch.device("cpu"))
    assert TOKENS not in on_device and on_device["input_ids"].dtype == torch.int64
    with torch.no_grad():
        logits, labels = target_logits(model, on_device["input_ids"], on_device["attention_mask"],
                                       on_device["labels"], on_device[TARGETS_AT])
        hidden = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        masked = model.cls(hidden[batch["labels"] != -100])
    assert torch.equal(labels, batch["labels"][batch["labels"] != -100])
    torch.testing.assert_close(logits, masked, rtol=0, atol=0)


def test_precision_is_resolved_per_device_and_fp16_gets_a_loss_scaler():
    from pipeline.consumers.training.precision import Precision, PrecisionError, precision_for, resolve

    cpu = torch.device("cpu")
    assert resolve("auto", cpu) == "fp32"  # no autocast on the CPU unless asked
    assert resolve("bf16", cpu) == "bf16" and resolve("fp16", cpu) == "fp16"
    with pytest.raises(PrecisionError, match="--precision 'fp8': choose one of auto, bf16, fp16, fp32"):
        resolve("fp8", cpu)
    assert precision_for("fp16", cpu).scaler.is_enabled()
    assert not precision_for("bf16", cpu).scaler.is_enabled() and not precision_for("auto", cpu).scaler.is_enabled()
    with Precision("bf16", cpu).autocast():
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16
    with Precision("fp32", cpu).autocast():
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.float32


def test_step_rows_read_the_device_once_per_flush(tmp_path):
    """Rows wait with their loss and gradient norm as tensors; a flush copies them in one go, sums the
    losses over the ranks in one call and writes each step's row (loss per target of the step)."""
    import json

    from pipeline.consumers.training.metrics import MetricsLog, StepRows

    reduced = []
    rows = StepRows(MetricsLog(str(tmp_path / "m.jsonl")), lambda values: reduced.append(values) or values)
    for step in (1, 2, 3):
        rows.add({"step": step, "lr": 0.1}, torch.tensor(6.0 * step), torch.tensor(0.5), step_targets=3.0)
    written = rows.flush()
    assert len(reduced) == 1 and reduced[0] == [6.0, 12.0, 18.0]
    assert [(r["step"], r["loss"], r["grad_norm"]) for r in written] == [(1, 2.0, 0.5), (2, 4.0, 0.5), (3, 6.0, 0.5)]
    assert [json.loads(line) for line in open(tmp_path / "m.jsonl")] == written
    assert rows.flush() == [] and len(reduced) == 1


def test_constant_and_wsd_schedules():
    """constant: the peak rate after the warmup; wsd: the peak until the last --decay_fraction of the
    run, then linear to 0 at the last step (linear and cosine decay from the end of the warmup)."""
    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.schedule import lr_at

    constant = TrainConfig(lr=1.0, warmup_steps=4, schedule="constant")
    assert [lr_at(s, constant, 100) for s in (0, 3, 4, 50, 100)] == [0.25, 1.0, 1.0, 1.0, 1.0]
    wsd = TrainConfig(lr=1.0, warmup_steps=4, schedule="wsd", decay_fraction=0.2)
    rates = [lr_at(s, wsd, 100) for s in range(101)]
    assert rates[:4] == [0.25, 0.5, 0.75, 1.0] and set(rates[4:81]) == {1.0}
    assert rates[90] == pytest.approx(0.5) and rates[100] == 0.0
    assert all(a > b for a, b in zip(rates[80:], rates[81:]))
    linear = TrainConfig(lr=1.0, warmup_steps=4, schedule="linear")
    assert lr_at(52, linear, 100) == pytest.approx(0.5)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "wsd"])
def test_min_lr_ratio_is_the_floor_of_the_decays(schedule):
    """--min_lr_ratio 0.1: each decay ends at a tenth of the peak instead of 0, halfway through it at
    0.55 (HF's cosine_with_min_lr); the warmup and the peak are unchanged."""
    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.schedule import lr_at

    floored = TrainConfig(lr=2.0, warmup_steps=4, schedule=schedule, min_lr_ratio=0.1, decay_fraction=0.5)
    plain = TrainConfig(**{**vars(floored), "min_lr_ratio": 0.0})
    rates = [lr_at(s, floored, 100) for s in range(101)]
    assert rates[:4] == [0.5, 1.0, 1.5, 2.0] and rates[100] == pytest.approx(0.2) and min(rates[4:]) >= 0.2 - 1e-12
    middle = 52 if schedule != "wsd" else 75  # halfway through the decay
    assert lr_at(middle, floored, 100) == pytest.approx(2.0 * 0.55) and lr_at(middle, plain, 100) == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:]))


def test_gradient_checkpointing_recomputes_the_layers_for_the_same_loss(spec, arch="bert"):
    """With --gradient_checkpointing each layer runs again in the backward pass (its activations were
    not kept); the loss and the gradients are those without it, dropout on (the recomputation
    replays the same masks)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from pipeline.consumers.training.loss import mlm_loss_sum

    _, batch = _model_and_batch(spec)
    results = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = build_model(spec, 64, torch.device("cpu"), arch=arch, size="tiny", hidden_dropout=0.1,
                            attention_dropout=0.1, gradient_checkpointing=checkpointing).train()
        layer = next(m for m in model.modules() if isinstance(m, GradientCheckpointingLayer))
        calls = []  # a module inside the first layer: transformers checkpoints the layer's forward, not its hooks
        next(m for m in layer.modules() if isinstance(m, torch.nn.Linear)).register_forward_hook(
            lambda *_, into=calls: into.append(1))
        torch.manual_seed(1)
        loss = mlm_loss_sum(model, batch)[0]
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((loss.detach(), grads, len(calls)))
    (plain, plain_grads, plain_calls), (checked, checked_grads, checked_calls) = results
    assert (plain_calls, checked_calls) == (1, 2)
    torch.testing.assert_close(checked, plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(checked_grads, plain_grads, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert", "modernbert", "electra"])
def test_dropout_flags_set_each_familys_own_fields(spec, arch):
    """--hidden_dropout and --attention_dropout reach the config fields of each family; 0 for both
    makes two forward passes in train mode equal."""
    from pipeline.consumers.training.models import set_dropout

    model = build_model(spec, 64, torch.device("cpu"), arch=arch, size="tiny", hidden_dropout=0.0,
                        attention_dropout=0.25)
    config = model.config.to_dict()
    hidden = {"distilbert": ["dropout"], "modernbert": ["embedding_dropout", "mlp_dropout"]}.get(
        arch, ["hidden_dropout_prob"])
    attention = "attention_dropout" if arch in ("distilbert", "modernbert") else "attention_probs_dropout_prob"
    assert [config[name] for name in hidden] == [0.0] * len(hidden) and config[attention] == 0.25
    _, batch = _model_and_batch(spec)
    model = build_model(spec, 64, torch.device("cpu"), arch=arch, size="tiny", hidden_dropout=0.0,
                        attention_dropout=0.0).train()
    torch.testing.assert_close(mlm_loss(model, batch), mlm_loss(model, batch), rtol=0, atol=0)

    class NoDropout:
        model_type = "plain"

    with pytest.raises(ValueError, match="--hidden_dropout: a plain config has none of hidden_dropout_prob"):
        set_dropout(NoDropout(), hidden=0.1)


def test_the_fp16_scaler_skips_inf_steps_without_reading_the_device(spec):
    """fp16: the fused AdamW takes the scaler's inf check as a tensor, so a step reads nothing back
    from the device (the unfused one made the scaler call .item() each step); a step with an inf
    gradient still changes no weight and no optimizer step count, and halves the scale; a finite
    one trains; the betas and epsilon are the flags'."""
    from pipeline.consumers.training.optimizer import adamw, apply_gradients
    from pipeline.consumers.training.precision import precision_for

    model, batch = _model_and_batch(spec)
    precision = precision_for("fp16", torch.device("cpu"))
    optimizer = adamw(model, 1e-3, 0.01, torch.device("cpu"), betas=(0.8, 0.95), eps=1e-6, fp16=True)
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.95) and optimizer.param_groups[0]["eps"] == 1e-6
    before = [p.detach().clone() for p in model.parameters()]
    scale = precision.scaler.get_scale()
    reads = []
    original = torch.Tensor.item

    def counted(self, *args):
        reads.append(1)
        return original(self, *args)

    for poisoned in (True, False):
        with precision.autocast():
            loss = mlm_loss(model, batch)
        precision.scaler.scale(loss).backward()
        if poisoned:
            next(model.parameters()).grad[0, 0] = float("inf")
        torch.Tensor.item = counted
        try:
            norm = apply_gradients(optimizer, precision.scaler, model.parameters(), 1.0)
        finally:
            torch.Tensor.item = original
        optimizer.zero_grad(set_to_none=True)
        assert not reads, "a step read the device back"
        steps = {float(state["step"]) for state in optimizer.state.values()}
        if poisoned:
            assert not torch.isfinite(norm) and steps == {0.0}
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
            assert precision.scaler.get_scale() == scale / 2
    assert steps == {1.0} and not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_exports_keep_the_newest_and_a_resume_drops_the_killed_runs_later_ones(spec, tmp_path):
    """export_model writes checkpoint-STEP/ (model and tokenizer, loadable by from_pretrained) and keeps
    the newest `keep`; on resume from step 2, the exports a killed run wrote after it, and a
    half-written one, are removed (the resumed run writes them again)."""
    from transformers import AutoModelForMaskedLM

    from pipeline.consumers.training.saved_model import drop_exports_after, export_model, exports

    model, _ = _model_and_batch(spec)
    for step in (1, 2, 3):
        export_model(model, spec, 64, str(tmp_path), step, keep=2)
    assert [step for step, _ in exports(str(tmp_path))] == [2, 3]
    (tmp_path / "checkpoint-5.partial").mkdir()
    drop_exports_after(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2"]
    loaded = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "checkpoint-2"))
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_tensorboard_hides_what_a_killed_run_logged_after_its_checkpoint(tmp_path):
    """Rows become HF Trainer's scalar names (train/loss, eval/loss); a resume from step 3 purges the
    killed run's steps 4 and 5, so each step has the resumed run's value once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pipeline.consumers.training.config import TrainConfig
    from pipeline.consumers.training.reporting import Reporters, scalars

    assert scalars({"step": 4, "loss": 2.0, "eval_accuracy": 0.5, "note": "x"}) == \
        (4, {"train/loss": 2.0, "eval/accuracy": 0.5})
    cfg = TrainConfig(output=str(tmp_path), report_to="tensorboard")
    killed = Reporters(cfg, main=True, resumed_at=None)
    for step in range(1, 6):
        killed.log({"step": step, "loss": float(step)})
    killed.close()
    time.sleep(1.1)  # event files are named by the second they were opened in
    resumed = Reporters(cfg, main=True, resumed_at=3)
    for step in (4, 5):
        resumed.log({"step": step, "loss": 10.0 * step})
    resumed.close()
    assert not Reporters(cfg, main=False, resumed_at=None)._sinks  # rank > 0 reports nothing
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0),
                                                                          (5, 50.0)]
