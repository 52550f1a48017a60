"""A tokenizer file alone must not exhaust the machine (finding 6) nor read anything but itself:
crafted tokenizer.json files are refused with a message naming the culprit, before `tokenizers`
serialises them or runs their regexes; real byte-level BPE tokenizers (GPT-2, Llama-3 patterns) load."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from pipeline.tokenizer.regex_safety import UnsafeRegex, check_regex
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerError, TokenizerSpec, build_tokenizer
from tests.conftest import REPO

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CATASTROPHIC = r"(\w+\s?)*$"  # exponential on a long word run with no match at the end


def _wordpiece() -> dict:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return json.loads(tok.to_str())


def _refused(config: dict, tmp_path, match: str) -> str:
    raw = json.dumps(config)
    with pytest.raises(TokenizerError, match=match):
        TokenizerSpec.from_json(raw)
    path = tmp_path / "tokenizer.json"
    path.write_text(raw)
    with pytest.raises(TokenizerError, match=match) as error:
        resolve_tokenizer_json(str(path))
    return str(error.value)


def test_an_id_near_2_31_is_refused_before_serialising(tmp_path):
    """The crafted file of the finding: one id at 2,147,483,640 passed the old id check, and
    `to_str()` (which resolve calls) then asked for 8 GiB, the masking tables for ~30 GB more.
    Not run against the old code for that reason: it would take the machine's memory."""
    config = _wordpiece()
    config["model"]["vocab"]["evil"] = 2_147_483_640
    message = _refused(config, tmp_path, "2,147,483,640")
    assert "over the" in message and str(tmp_path) in message


def test_large_gaps_in_the_ids_are_refused(tmp_path):
    config = _wordpiece()
    config["model"]["vocab"]["far"] = 100_000
    _refused(config, tmp_path, "unused ids")
    config = _wordpiece()
    config["added_tokens"] = [{"id": 500_000, "content": "<x>", "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True}]
    _refused(config, tmp_path, "unused ids")
    config = _wordpiece()
    config["model"]["vocab"]["near"] = 900  # a small gap stays allowed (existing files have a few)
    assert TokenizerSpec.from_json(json.dumps(config)).vocab_size == 901


ROBERTA = REPO / "tests" / "data" / "tokenizers" / "roberta.json"


@pytest.mark.parametrize(("family", "moved", "onto"), [("roberta", "<mask>", "<pad>"), ("wordpiece", "[MASK]", "[PAD]"),
                                                       ("roberta", "</s>", "<s>"), ("wordpiece", "[PAD]", "hello")])
def test_two_roles_on_one_id_are_refused_naming_the_clash(tmp_path, family, moved, onto):
    """Issue 36 item 10: `<mask>` given `<pad>`'s id was refused with "tokenizer has no pad token" (the
    load-and-save of resolve keeps one token per id); `[MASK]` on `[PAD]`'s id was accepted, every
    [MASK] a [PAD]."""
    config = json.loads(ROBERTA.read_text()) if family == "roberta" else _wordpiece()
    ids = {t["content"]: t["id"] for t in config.get("added_tokens", [])} | config["model"]["vocab"]
    config["model"]["vocab"][moved] = ids[onto]
    for token in config.get("added_tokens", []):
        if token["content"] == moved:
            token["id"] = ids[onto]
    message = _refused(config, tmp_path, rf"tokenizer gives id {ids[onto]} to ")
    assert f"{moved!r} (its " in message and f"{onto!r}" in message, message
    assert "no pad token" not in message and "no cls token" not in message, message


@pytest.mark.parametrize("where", ["pre_tokenizer", "normalizer"])
def test_a_backtracking_regex_is_refused_naming_where(tmp_path, where):
    config = _wordpiece()
    if where == "pre_tokenizer":
        config["pre_tokenizer"] = json.loads(pre_tokenizers.Split(Regex(CATASTROPHIC), "isolated").__getstate__())
    else:
        config["normalizer"] = json.loads(normalizers.Replace(Regex(CATASTROPHIC), " ").__getstate__())
    message = _refused(config, tmp_path, "nested repetition")
    assert where in message and repr(r"(\w+\s?)") in message  # the group, as Python writes it


def _byte_level_bpe(pre_tokenizer) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>", "<mask>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = (SAMPLE_BOOKS / "drama__doctor_faustus.txt").read_text(encoding="utf-8-sig")[20_000:40_000]
    tok.train_from_iterator(text.split("\n"), trainer=trainer)
    return tok


@pytest.mark.parametrize("pattern", [LLAMA3, O200K, GPT2, None])
def test_real_byte_level_tokenizers_still_load(tmp_path, pattern):
    if pattern is None:  # GPT-2 / RoBERTa: the pattern is built into ByteLevel
        pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:  # Llama-3 / OLMo: Split with the pattern, then ByteLevel without its own regex
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _byte_level_bpe(pre)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    spec = TokenizerSpec.from_json(resolve_tokenizer_json(str(path)))
    text = "Why, this is hell, nor am I out of it: 1234 souls'd    weep\n\nthere."
    assert build_tokenizer(spec).encode(text).ids == tok.encode(text).ids
    assert spec.vocab_size == tok.get_vocab_size()


def test_files_that_are_not_tokenizers_say_so(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"a": 1}')
    with pytest.raises(TokenizerError) as error:
        resolve_tokenizer_json(str(path))
    assert "valid JSON but not a tokenizer.json" in str(error.value) and "model" in str(error.value)
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TokenizerError, match="not UTF-8"):
        resolve_tokenizer_json(str(path))


def test_a_tokenizer_folder_reads_only_its_tokenizer_json(tmp_path):
    """The folder's other files (configs that name code, `auto_map`, Python files) are never opened."""
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((SAMPLE_TOKENIZER / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text('{"auto_map": {"AutoTokenizer": ["evil.Tok", null]}}')
    (folder / "evil.py").write_text("raise SystemExit('imported')\n")
    opened: list[str] = []
    active = [True]

    def hook(event, args):
        if active[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(str(folder)):
            opened.append(args[0])

    sys.addaudithook(hook)  # cannot be removed: `active` switches it off after the call
    try:
        resolve_tokenizer_json(str(folder))
    finally:
        active[0] = False
    assert opened == [str(folder / "tokenizer.json")]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab()|*+?{}[]\\^$.,123:<>=!wsd ")), max_size=24))
def test_the_regex_rule_answers_only_with_unsafe_regex(pattern):
    """Any text: accepted, or UnsafeRegex; and an accepted pattern holding a quantifier or an
    alternation is refused once a group repeats it."""
    try:
        check_regex(pattern)
    except UnsafeRegex:
        return
    try:
        check_regex(f"(?:{pattern}|x)+")
    except UnsafeRegex:
        return
    pytest.fail(f"(?:{pattern}|x)+ was accepted")


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)*b", r"(a*)*", r"(x+x+)+y", r"(a|b){2,}", r"(.)\1",
                                     r"\k<n>", r"a**", r"(?(1)a|b)", r"(?:a?b?)+"])
def test_nested_repetition_and_backreferences_are_refused(pattern):
    with pytest.raises(UnsafeRegex):
        check_regex(pattern)
