"""Training step speed with the full MLM head (`model(**batch).loss`, the vocabulary projection at
every position) and with the gathered head (`pipeline.consumers.training.loss.mlm_loss`: projection only
at the ~15% target positions), as `jobs.train` now does. Same model, same batches, interleaved.

    python -m benchmarks.train_step [--configs tiny,mini] [--seq_len 128,512] [--batch_size 16] [--repeat 7]

Prints tokens/s (forward + backward + AdamW step) per configuration, the medians and the ratio.
CPU by default (`--device cuda` on a GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from pipeline.consumers.training.loss import mlm_loss
from pipeline.consumers.training.models import MODEL_SIZES, build_model
from pipeline.sample import SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec


def _batch(batch_size: int, seq_len: int, vocab: int, generator: torch.Generator) -> dict:
    ids = torch.randint(1000, vocab, (batch_size, seq_len), generator=generator)
    labels = torch.full_like(ids, -100)
    selected = torch.rand(ids.shape, generator=generator) < 0.15
    labels[selected] = ids[selected]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _seconds_per_step(model, optimizer, batch, loss_of, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if batch["input_ids"].is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


HEADS = {"full": lambda model, batch: model(**batch).loss, "gathered": mlm_loss}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", default="tiny,mini")
    parser.add_argument("--seq_len", default="128,512")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed run")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per head (interleaved)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--arch", default="bert", help="a family of pipeline.consumers.training.models.ARCHITECTURES")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(SAMPLE_TOKENIZER)))  # bert-base-uncased
    results = []
    for config in args.configs.split(","):
        for seq_len in (int(x) for x in args.seq_len.split(",")):
            torch.manual_seed(0)
            model = build_model(spec, seq_len, device, arch=args.arch, size=config).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            batch = {k: v.to(device) for k, v in _batch(args.batch_size, seq_len, 30522,
                                                         torch.Generator().manual_seed(1)).items()}
            for loss_of in HEADS.values():  # warm-up
                _seconds_per_step(model, optimizer, batch, loss_of, 1)
            times: dict[str, list[float]] = {name: [] for name in HEADS}
            for _ in range(args.repeat):
                for name, loss_of in HEADS.items():
                    times[name].append(_seconds_per_step(model, optimizer, batch, loss_of, args.steps))
            tokens = args.batch_size * seq_len
            row = {"arch": args.arch, "config": config, "hidden_layers": MODEL_SIZES[config][:2], "seq_len": seq_len,
                   "batch_size": args.batch_size, "device": str(device)}
            for name in HEADS:
                row[f"{name}_tokens_per_s"] = tokens / statistics.median(times[name])
            row["speedup"] = row["gathered_tokens_per_s"] / row["full_tokens_per_s"]
            results.append(row)
            print(f"{config:5s} L={seq_len:4d} B={args.batch_size}: full head {row['full_tokens_per_s']:9,.0f} tok/s, "
                  f"gathered {row['gathered_tokens_per_s']:9,.0f} tok/s, x{row['speedup']:.2f} (median of "
                  f"{args.repeat})", flush=True)
    out = {"results": results, "torch_threads": torch.get_num_threads()}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=2)
    return out


if __name__ == "__main__":
    main()
