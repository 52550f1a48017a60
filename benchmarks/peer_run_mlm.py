"""The peer: transformers' run_mlm.py preprocessing path, as its users run it.

load_dataset("text") -> map(tokenize, num_proc=cores) -> group_texts into 512 blocks ->
static masking of every block with DataCollatorForLanguageModeling -> save_to_disk.
Prints one JSON line: tokens (in blocks) and rows.
"""

from __future__ import annotations

import argparse
import json
import os
from itertools import chain
from pathlib import Path

from benchmarks.corpus import corpus_files
from schemas.shard import INPUT_IDS, LABELS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--cache_dir", required=True)
    parser.add_argument("--block_size", type=int, default=512)
    args = parser.parse_args()

    import datasets
    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    datasets.disable_progress_bars()
    cores = os.cpu_count() or 1
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    files = [str(p) for p in corpus_files(Path(args.corpus))]
    raw = datasets.load_dataset("text", data_files={"train": files}, cache_dir=args.cache_dir)["train"]

    def tokenize(examples):  # as run_mlm.py does when not line_by_line
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize, batched=True, num_proc=cores, remove_columns=["text"])

    def group_texts(examples):  # run_mlm.py's group_texts, verbatim in behaviour
        concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
        total = (len(concatenated[INPUT_IDS]) // args.block_size) * args.block_size
        return {k: [t[i : i + args.block_size] for i in range(0, total, args.block_size)]
                for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=cores)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)

    def mask(batch):
        inputs = torch.tensor(batch[INPUT_IDS])
        special = torch.tensor(batch["special_tokens_mask"], dtype=torch.bool)
        masked, labels = collator.torch_mask_tokens(inputs, special_tokens_mask=special)
        return {INPUT_IDS: masked.tolist(), LABELS: labels.tolist()}

    masked = grouped.map(mask, batched=True, num_proc=cores, remove_columns=["special_tokens_mask"])
    masked.save_to_disk(args.output)
    print(json.dumps({"tokens": masked.num_rows * args.block_size, "rows": masked.num_rows}))


if __name__ == "__main__":
    main()
