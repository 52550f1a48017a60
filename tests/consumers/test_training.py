"""The trainer's gathered MLM head: the same loss and gradients as the full head of
`BertForMaskedLM`, with the vocabulary projection only at the targets."""

from __future__ import annotations

import torch

from pipeline.consumers.training import TrainConfig, build_model, mlm_loss


def _model_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(TrainConfig(data="", output="", config="tiny"), 30522, 64, 0).eval()  # eval: no dropout
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30522, (6, 64), generator=generator)
    attention = torch.ones_like(ids)
    attention[2, 40:] = 0  # a padded row
    labels = torch.full_like(ids, -100)
    selected = (torch.rand(ids.shape, generator=generator) < 0.15) & attention.bool()
    selected[3] = False  # a row without targets
    labels[selected] = ids[selected]
    return model, {"input_ids": ids, "attention_mask": attention, "labels": labels}


def test_gathered_head_gives_the_full_heads_loss_and_gradients():
    model, batch = _model_and_batch()
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


def test_a_batch_without_targets_gives_zero_and_still_backpropagates():
    model, batch = _model_and_batch(1)
    batch["labels"][:] = -100
    loss = mlm_loss(model, batch)
    loss.backward()
    assert loss.item() == 0.0
