"""Non-special added tokens on the fast path (issue 33): the text is split at them as `tokenizers`' own
AddedVocabulary splits it (every flag: normalized, lstrip, rstrip, single_word; leftmost-longest;
special-token strings stay text), for a WordPiece, two byte-level and two SentencePiece tokenizers.
The reference is the real tokenizer's `encode(text, add_special_tokens=False)`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer

from pipeline.tokenizer.added_tokens import added_support
from pipeline.tokenizer.encode import tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from tests.conftest import TOKENIZER_DIR

DATA = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
BASES = {
    "bert": TOKENIZER_DIR / "tokenizer.json",
    "llama3": DATA / "llama3.json",
    "gpt2": DATA / "gpt2.json",
    "llama_bpe": DATA / "llama_bpe" / "tokenizer.json",
    "xlmr_unigram": DATA / "xlmr_unigram" / "tokenizer.json",
}
# (content, flags): every flag alone and together, overlapping strings (leftmost-longest), strings
# inside words, with spaces, with non-ASCII, one overlapping a special token's string.
TOKENS = [
    ("new york", {}), ("york city", {}), ("new", {"single_word": True}), ("<fim>", {}), ("<fim_mid>", {}),
    ("zz", {"lstrip": True}), ("qq", {"rstrip": True}), ("ww", {"lstrip": True, "rstrip": True}),
    ("ing", {}), ("Cafe!", {}), ("caf\u00e9", {}), ("\u6f22\u5b57", {}), ("ab", {"single_word": True, "lstrip": True}),
    ("SEP]x", {}), ("\u2581x", {}),
]
PIECES = ["new york", "New York", "NEW YORK", "york city", "new", "news", "renew", "new_", "<fim>", "<fim_mid>",
          "<fim_mi", "zz", " zz", "  zz  ", "qq ", "ww", " ww ", "\tww\n", "ing", "singing", "Cafe", "cafe", "caf\u00e9",
          "cafe\u0301", "CAF\u00c9", "\u6f22\u5b57", "\u6f22\u5b57\u306e", "ab", " ab", "xab", "ab.", "[SEP]", "[SEP]x",
          "SEP]x", "\u2581x", " ", "  ", "\n", "word", "the", ",", ".", "\u0301", "e", "\ufb01", "\u00bd", "1234"]


def _with_added(name: str, normalized: bool | None) -> str:
    tokenizer = Tokenizer.from_file(str(BASES[name]))
    tokenizer.add_tokens([AddedToken(content, **flags, **({} if normalized is None else {"normalized": normalized}))
                          for content, flags in TOKENS])
    return tokenizer.to_str()


def _texts() -> list[str]:
    rng = random.Random(33)
    texts = ["new york", "new yorknew york", "new york city", "<fim_mid><fim>", "x zz y", "singing ing", "new", "",
             "[SEP]x SEP]x", "cafe\u0301 caf\u00e9 Cafe", "  zz  ww  qq  "]
    for _ in range(150):
        texts.append("".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 25))))
    return texts


def _check(tokenizer_json: str) -> list[str]:
    spec = TokenizerSpec.from_json(tokenizer_json)
    real = Tokenizer.from_str(tokenizer_json)  # the file as it is (no special string in these texts)
    real.encode_special_tokens = True
    hf = build_tokenizer(spec)
    fast = FastTokenizer(build_tokenizer(spec), tokenizer_json)
    bad = []
    for text in _texts():
        expected = real.encode(text, add_special_tokens=False).ids
        for how, got in (("encode", fast.encode(text)), ("encode_bytes", fast.encode_bytes(text.encode())),
                         ("job pieces", tokenize_text(fast, text)), ("hf backend", tokenize_text(hf, text))):
            if got.tolist() != expected:
                bad.append(f"{how} {text!r}: {got.tolist()} != {expected}")
    return bad


# (tokenizer, normalized flag of the added tokens): None keeps `add_tokens`' default (normalized).
# xlmr_unigram: its special pieces are out of the content lattice (content.py), its added tokens keep their ids.
CASES = [("bert", None), ("bert", False), ("llama3", None), ("gpt2", False), ("llama_bpe", False),
         ("xlmr_unigram", False)]


@pytest.mark.parametrize(("name", "normalized"), CASES)
def test_added_tokens_split_as_the_real_tokenizer_splits_them(name, normalized):
    tokenizer_json = _with_added(name, normalized)
    assert choose_backend("fast", tokenizer_json) == ("fast", [])
    assert _check(tokenizer_json) == []


def test_a_unigram_content_tokenizer_keeps_the_added_ids():
    """Emptying the special pieces takes their strings out of the vocabulary: read back, the added
    tokens would be numbered anew (`new york` 4006, not 4001) unless the special ones go last."""
    tokenizer_json = _with_added("xlmr_unigram", False)
    hf = build_tokenizer(TokenizerSpec.from_json(tokenizer_json))
    assert hf.token_to_id("new york") == Tokenizer.from_str(tokenizer_json).token_to_id("new york")


def test_the_fast_path_emits_the_added_ids():
    """Not only equal ids: the added tokens' own ids, where the text holds them."""
    tokenizer_json = _with_added("llama3", None)
    fast = FastTokenizer(build_tokenizer(TokenizerSpec.from_json(tokenizer_json)), tokenizer_json)
    ids = {t["content"]: t["id"] for t in json.loads(tokenizer_json)["added_tokens"]}
    got = fast.encode("a new york<fim_mid>b").tolist()
    assert ids["new york"] in got and ids["<fim_mid>"] in got and ids["<fim>"] not in got


def test_cuts_never_straddle_an_added_token():
    """A token with a space takes the space out of the cut rule; one stripping whitespace takes all of it."""
    fast = FastTokenizer(build_tokenizer(TokenizerSpec.from_json(_with_added("bert", None))), _with_added("bert", None))
    assert " " not in fast.cuts.before and "\t" not in fast.cuts.before
    plain = Tokenizer.from_file(str(BASES["llama3"]))
    plain.add_tokens([AddedToken("<fim>")])
    kept = FastTokenizer(build_tokenizer(TokenizerSpec.from_json(plain.to_str())), plain.to_str())
    assert kept.cuts.before == " \t"


def test_what_is_not_proven_is_refused_with_a_reason():
    """Tokens matched on text a Precompiled (not per-character) normalizer made, and a Metaspace
    that marks only the first part, are refused, naming why."""
    with pytest.raises(UnsupportedTokenizer, match="added tokens matched on the text normalized by Precompiled"):
        choose_backend("fast", _with_added("xlmr_unigram", True))
    config = json.loads(_with_added("xlmr_unigram", False))
    config["pre_tokenizer"]["prepend_scheme"] = "first"
    assert any("prepend_scheme 'first'" in problem for problem in added_support(config))
    bert = Tokenizer.from_file(str(BASES["bert"]))
    bert.add_tokens(["Cafe", "caf\u00e9"])  # both "cafe" once lower-cased and stripped of accents
    assert any("matched as one string" in problem for problem in added_support(json.loads(bert.to_str())))


def test_a_normalized_token_beside_non_ascii_goes_whole_to_the_real_tokenizer():
    """`café` (normalized by BERT's NFD + accent stripping) ends in a non-ASCII character: the parts
    beside it are not proven to normalize alone as in the text, so the real tokenizer encodes it."""
    tokenizer_json = _with_added("bert", None)
    spec = TokenizerSpec.from_json(tokenizer_json)
    fast = FastTokenizer(build_tokenizer(spec), tokenizer_json)
    assert fast._added.matches("a caf\u00e9 b") is None
    new_york = next(t["id"] for t in json.loads(tokenizer_json)["added_tokens"] if t["content"] == "new york")
    assert fast._added.matches("a new york b") == [(2, 10, new_york)]
    np.testing.assert_array_equal(fast.encode("a caf\u00e9\u0301 b"),
                                  build_tokenizer(spec).encode("a caf\u00e9\u0301 b", add_special_tokens=False).ids)
