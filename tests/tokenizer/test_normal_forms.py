"""NFC / NFKC normalizers before a byte-level BPE on the fast path (issue 33): the kernel encodes text
the probe proves normalized as it is, other text after the tokenizer's own normalizer; the ids are the
real tokenizer's on decomposed accents, Hangul jamo, compatibility characters and reordered marks."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pipeline.tokenizer.bytelevel.normal_forms import NormalForm, cached_inert, normal_form
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.tokenizer.test_fast import HOSTILE

DATA = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
TRAPS = ["e\u0301", "\u00e9", "E\u0301", "a\u0323\u0301", "a\u0301\u0323", "\u0301", "\u0323", "\u1100\u1161",
         "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1161", "\u11a8", "\ud55c\uad6d\uc5b4", "\ufb01", "\u2460", "\u00b2",
         "\u00a8", "\u00b4", "\uff21\uff22", "\u2163", "\u00bd", "\u00a0", "\u3000", "\u212b", "\u2126", "\u0344",
         "\u0f73", "\u1e9b\u0323", "\u0958", "\u2000", "\u037e", " ", "  ", "\n", "word", "the", "1234", ",", "'s",
         "caf\u00e9", "\u6f22\u5b57", "\U0001d15e", "\U0001F600", "\u0915\u094d\u0937", "\u0cca", "\u0cc6\u0cd5"]


def _texts() -> list[str]:
    rng = random.Random(33)
    texts = [HOSTILE, "".join(TRAPS), "plain ascii text only"]
    for _ in range(200):
        texts.append("".join(rng.choice(TRAPS) for _ in range(rng.randrange(1, 30))))
    return texts


@pytest.fixture(scope="module", params=[("llama3", "NFC"), ("llama3", "NFKC"), ("gpt2", "NFKC")],
                ids=lambda p: "-".join(p))
def normalized(request) -> str:
    base, form = request.param
    config = json.loads((DATA / f"{base}.json").read_text())
    config["normalizer"] = {"type": "Sequence", "normalizers": [{"type": form}]}
    return json.dumps(config, ensure_ascii=False)


def test_the_ids_are_the_real_tokenizers(normalized):
    assert choose_backend("fast", normalized) == ("fast", [])
    spec = TokenizerSpec.from_json(normalized)
    real, fast = build_tokenizer(spec), FastTokenizer(build_tokenizer(spec), normalized)
    bad = []
    for text in _texts():
        expected = real.encode(text, add_special_tokens=False).ids
        for how, got in (("encode", fast.encode(text)), ("bytes", fast.encode_bytes(text.encode())),
                         ("job pieces", tokenize_text(fast, text))):
            if got.tolist() != expected:
                bad.append(f"{how} {text[:40]!r}")
    assert bad == []


def test_the_probe_finds_what_the_quick_check_says():
    """Inert: ASCII, precomposed letters, Hangul syllables, for NFC the compatibility characters;
    not inert: combining marks, conjoining vowel and final jamo, singletons, composition exclusions."""
    nfc, nfkc = cached_inert("NFC"), cached_inert("NFKC")
    assert nfc[:128].all() and nfkc[:128].all()
    for char in "\u00e9\u00c5\uac00\ud55c\u6f22\ufb01\u2460\u00b2\u00a0\u3000\U0001F600":
        assert nfc[ord(char)], repr(char)
    for char in "\u0301\u0323\u1161\u11a8\u212b\u2126\u0344\u0958\u0cd5\u0f73":
        assert not nfc[ord(char)] and not nfkc[ord(char)], repr(char)
    for char in "\ufb01\u2460\u00b2\u00a0\u3000\uff21\u2163\u00a8":
        assert not nfkc[ord(char)], repr(char)
    assert nfc.sum() > 300_000 and nfkc.sum() > 300_000  # most of planes 0-3 and 14


def test_inert_text_skips_the_normalizer_and_other_text_is_normalized():
    form = NormalForm("NFC")
    text = "caf\u00e9 \ud55c\uad6d\uc5b4 \U0001F600 plain"
    assert form.apply(text) is text
    assert form.apply("cafe\u0301") == "caf\u00e9"


def test_other_normalizers_are_refused_naming_them():
    assert normal_form({"type": "NFD"})[1] == ["normalizer NFD (only none, NFC or NFKC)"]
    assert normal_form({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})[1] == [
        "normalizer NFC+Lowercase (only none, NFC or NFKC)"]
    assert normal_form({"type": "Sequence", "normalizers": []}) == (None, [])
