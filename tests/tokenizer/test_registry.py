"""The registry (families.py) is the one place that knows the tokenizer families: a family listed
there and nowhere else is found, detected, encoded with, cut and masked by; detection reads the
parsed JSON; one error type says what the fast path cannot reproduce; the encoder's per-tokenizer
facts neither keep a tokenizer alive nor outlive it."""

from __future__ import annotations

import gc
import json
import pickle
import weakref
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from pipeline.tokenizer import encode, families
from pipeline.tokenizer.bytelevel.fast import ByteLevelFastTokenizer
from pipeline.tokenizer.cut_rule import NO_CUTS, WHITESPACE_CUTS, CutRule
from pipeline.tokenizer.derived_cuts import cut_rule_and_reason
from pipeline.tokenizer.errors import TokenizerError, UnsupportedTokenizer
from pipeline.tokenizer.family import Family
from pipeline.tokenizer.fast import FastTokenizer, choose_backend
from pipeline.tokenizer.sentencepiece.fast import SentencePieceFastTokenizer
from pipeline.tokenizer.spec import TokenizerSpec
from pipeline.tokenizer.wordpiece.fast import WordPieceFastTokenizer

TOKENIZERS = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
WORDS = ["the", "+re", "+s", "cat", "dog", "sat"]


def _word_level(words: list[str] = WORDS) -> str:
    """A WordLevel tokenizer (no family of ours claims one): specials first, then `words`."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    real = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    real.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    real.add_special_tokens(SPECIALS)
    return real.to_str()


class _RealEncoder:
    """A family encoder that asks the real tokenizer, and records what it was given."""

    given: list[int] = []

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        self.tokenizer, self.tables = tokenizer, None

    def encode(self, text: str) -> np.ndarray:
        _RealEncoder.given.append(len(text))
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def encode_bytes(self, data: bytes) -> np.ndarray:
        return self.encode(data.decode("utf-8"))


TOY = Family(name="toy WordLevel", claims=lambda config: (config.get("model") or {}).get("type") == "WordLevel",
             support=lambda config: [], make=_RealEncoder, cuts=lambda config, tokenizer_json: WHITESPACE_CUTS,
             continues_word=lambda config: (lambda token: token.startswith("+")), slice_chars=8)


def test_a_family_listed_only_in_the_registry_is_found_and_used(monkeypatch):
    """Listing a Family is all it takes: backend choice, the encoder, the cut rule, the slice size and
    the word-continuation rule all come from it (no other module names a family)."""
    raw = _word_level()
    config = json.loads(raw)
    assert choose_backend("auto", raw)[0] == "hf"  # before listing: no family
    monkeypatch.setattr(families, "FAMILIES", [*families.FAMILIES, TOY])
    assert families.family_of(config) is TOY
    assert choose_backend("fast", raw) == ("fast", [])
    real = Tokenizer.from_str(raw)
    fast = FastTokenizer(real, raw)
    assert fast.family is TOY and fast.cuts == WHITESPACE_CUTS
    _RealEncoder.given.clear()
    text = "the cat sat the dog sat the cat"
    assert encode.tokenize_text(fast, text).tolist() == real.encode(text, add_special_tokens=False).ids
    assert len(_RealEncoder.given) > 1 and max(_RealEncoder.given) < len(text)  # the family's slices
    assert cut_rule_and_reason(config, raw) == (WHITESPACE_CUTS, "its fast family's pre-tokenizer")
    spec = TokenizerSpec.from_json(raw)
    assert [real.id_to_token(i) for i in spec.continuation_ids] == ["+re", "+s"]  # the family's rule


def test_llama_style_continuations_follow_the_sentencepiece_family():
    """A byte-fallback BPE whose normalizer writes `▁` (Llama, no pre-tokenizer) is SentencePiece: a
    token continues a word unless it starts with `▁` (not every token, as a `Ġ` rule says)."""
    raw = (TOKENIZERS / "llama_bpe" / "tokenizer.json").read_text()
    spec = TokenizerSpec.from_json(raw)
    vocab = json.loads(raw)["model"]["vocab"]
    starts = {token for token in vocab if token.startswith("\u2581")}
    assert len(starts) > 100
    continuing = {token for token, i in vocab.items() if i in set(spec.continuation_ids)}
    assert continuing and not continuing & starts
    assert continuing == {t for t, i in vocab.items() if t not in starts and i not in spec.special_ids}


def _bpe(pre_tokenizer: dict | None, normalizer: dict | None = None) -> dict:
    return {"version": "1.0", "added_tokens": [], "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}


def test_detection_reads_components_not_strings_in_the_dumped_json():
    """A family is claimed by a component of its type anywhere in the tree, never by a string that
    happens to spell the type (a Split on the literal text `ByteLevel`)."""
    split_on = {"type": "Split", "pattern": {"String": "ByteLevel"}, "behavior": "Isolated", "invert": False}
    assert families.family_of(_bpe(split_on)) is None
    assert families.family_of(_bpe(dict(split_on, pattern={"String": "Metaspace"}))) is None
    nested = {"type": "Sequence", "pretokenizers": [{"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}]}
    assert families.family_of(_bpe(nested)).name == "byte-level BPE"
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    assert families.family_of(_bpe(metaspace)).name == "SentencePiece"
    prepend = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}]}
    assert families.family_of(_bpe(None, prepend)).name == "SentencePiece"


@pytest.mark.parametrize("encoder, family", [(WordPieceFastTokenizer, "WordPiece"),
                                             (ByteLevelFastTokenizer, "byte-level BPE"),
                                             (SentencePieceFastTokenizer, "SentencePiece")])
def test_every_family_refuses_with_one_error_type(encoder, family):
    """Each family's encoder, given a tokenizer it does not cover, raises UnsupportedTokenizer (a
    TokenizerError) naming its family and the reasons; the error survives pickling (Beam)."""
    raw = _word_level()
    with pytest.raises(UnsupportedTokenizer) as caught:
        encoder(Tokenizer.from_str(raw), raw)
    error = caught.value
    assert isinstance(error, TokenizerError) and error.family == family and error.reasons
    assert str(error).startswith(f"{family} family: ") and "WordLevel" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.reasons, again.family) == (UnsupportedTokenizer, str(error),
                                                                      error.reasons, family)


def test_fast_backend_refusal_names_the_option_and_what_to_use():
    raw = _word_level()
    with pytest.raises(UnsupportedTokenizer, match=r"^--tokenizer_backend fast cannot reproduce this tokenizer "
                       r"exactly: no fast family for a model WordLevel .*\(use --tokenizer_backend auto or hf\)$"):
        choose_backend("fast", raw)
    with pytest.raises(UnsupportedTokenizer, match="no fast family"):
        FastTokenizer(Tokenizer.from_str(raw), raw)


def test_the_encoder_keeps_no_tokenizer_alive():
    """The cut rule and special-id guard of a real tokenizer are kept only while it lives."""
    real = Tokenizer.from_str(_word_level())
    assert encode.tokenize_text(real, "the cat sat").tolist() == [5, 8, 10]
    alive = weakref.ref(real)
    del real
    gc.collect()
    assert alive() is None


def test_a_new_tokenizer_at_a_dead_ones_address_gets_its_own_cuts():
    """Tokenizers made and dropped in turn (CPython reuses their addresses): each gets the cut rule
    of its own JSON, never one found for an earlier tokenizer at the same id()."""
    whitespace, whole = _word_level(), _word_level()
    config = json.loads(whole)
    config["pre_tokenizer"] = None  # no pre-tokenizer, no model that proves a cut: documents whole
    whole = json.dumps(config)
    seen: dict[int, CutRule] = {}
    reused = 0
    for round_ in range(40):
        raw, expected = (whitespace, WHITESPACE_CUTS) if round_ % 2 else (whole, NO_CUTS)
        real = Tokenizer.from_str(raw)
        assert encode.cuts_of(real).before == expected.before
        reused += id(real) in seen and seen[id(real)] != expected
        seen[id(real)] = expected
        del real
    assert reused  # the case this test is about did happen
