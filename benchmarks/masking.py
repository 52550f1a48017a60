"""Masking alone on 512-token rows, one thread: our numba kernel vs DataCollatorForLanguageModeling
(torch and numpy paths, given special_tokens_mask). Prints one JSON line of M tokens/s medians."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from pipeline.kernels.rows.masking import mask_rows
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec

ROWS, SEQ = 256, 512


def _rows(spec: TokenizerSpec, rng: np.random.Generator) -> np.ndarray:
    # real text has ~20% word-continuation pieces; uniform ids over the vocabulary come close
    ids = rng.integers(1000, spec.vocab_size, (ROWS, SEQ)).astype(np.int16)
    ids[:, 0], ids[:, -1] = spec.cls_id, spec.sep_id
    return ids


def _rate(fn, repeat: int, tokens: int) -> list[float]:
    fn()  # burn-in (and numba load from cache)
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        rates.append(tokens / (time.perf_counter() - start) / 1e6)
    return rates


def measure(tokenizer: str, repeat: int) -> dict:
    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    torch.set_num_threads(1)
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(tokenizer))
    rule = spec.masking_rule(0.15, 0.8, 0.1)
    rng = np.random.default_rng(0)
    ids = _rows(spec, rng)
    seeds = rng.integers(0, 2**63, ROWS, dtype=np.uint64)
    inner = 20  # calls per timing, so a timing is long enough to be stable

    def ours_calls() -> None:
        # A new epoch per call: the same masks again would let the branch predictor learn them.
        for epoch in range(inner):
            mask_rows(ids, seeds, epoch, rule)

    ours = _rate(ours_calls, repeat, ids.size * inner)
    units = {}
    for unit in ("word", "span"):
        unit_rule = spec.masking_rule(0.15, 0.8, 0.1, unit=unit)
        units[unit] = _rate(lambda: [mask_rows(ids, seeds, e, unit_rule) for e in range(inner)], repeat,
                            ids.size * inner)
    collator = DataCollatorForLanguageModeling(AutoTokenizer.from_pretrained(tokenizer), mlm_probability=0.15)
    special_np = rule.is_special[ids]
    ids64 = ids.astype(np.int64)
    ids_t, special_t = torch.from_numpy(ids64), torch.from_numpy(special_np)
    hf_torch = _rate(lambda: collator.torch_mask_tokens(ids_t.clone(), special_tokens_mask=special_t.clone()),
                     repeat, ids.size)
    hf_numpy = _rate(lambda: collator.numpy_mask_tokens(ids64.copy(), special_tokens_mask=special_np.copy()),
                     repeat, ids.size)
    runs = {"ours": ours, "ours_whole_word": units["word"], "ours_span": units["span"], "collator_torch": hf_torch,
            "collator_numpy": hf_numpy}
    return {name: statistics.median(r) for name, r in runs.items()} | {f"{k}_all": v for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.tokenizer, args.repeat)))


if __name__ == "__main__":
    main()
