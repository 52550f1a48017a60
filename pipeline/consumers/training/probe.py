"""The fill-mask probe of `jobs.train --probe`: the model's top guesses for each [MASK] of a text file."""

from __future__ import annotations

import torch

from schemas.shard import INPUT_IDS


def probe(model, tokenizer, path: str, device: torch.device, top_k: int = 5) -> list[str]:
    """Top predictions for each [MASK] in each line of a text file (the tutorial's check)."""
    lines = []
    model.eval()
    with open(path, encoding="utf-8") as handle:
        for sentence in (line.strip() for line in handle):
            if not sentence:
                continue
            encoded = tokenizer(sentence, return_tensors="pt").to(device)
            with torch.no_grad():
                logits = model(**encoded).logits[0]
            where = (encoded[INPUT_IDS][0] == tokenizer.mask_token_id).nonzero().flatten().tolist()
            guesses = [tokenizer.convert_ids_to_tokens(logits[i].topk(top_k).indices.tolist()) for i in where]
            lines.append(f"{sentence} -> {guesses}")
    model.train()
    return lines
