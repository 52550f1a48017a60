"""A tokenizer file alone must not exhaust the machine (finding 6) nor read anything but itself:
crafted tokenizer.json files are refused with a message naming the culprit, before `tokenizers`
serialises them or runs their regexes; real byte-level BPE tokenizers (GPT-2, Llama-3 patterns) load."""

from __future__ import annotations

import json
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.safety.regexes import UnsafeRegex, check_regex
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
    """The crafted file of the finding: one id at 2,147,483,640 (it fits int32), for which
    `to_str()` (which resolve calls) asks for 8 GiB, the masking tables for ~30 GB more.
    Not run without the check for that reason: it would take the machine's memory."""
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
                                     r"\k<n>", r"a**", r"(?(1)a|b)", r"(?:a?b?)+",
                                     r"\Q(?:a|aa)+b\E"])  # Oniguruma has no \Q...\E quoting
def test_nested_repetition_and_backreferences_are_refused(pattern):
    with pytest.raises(UnsafeRegex):
        check_regex(pattern)


# Each of these runs `(?:a|aa)+b` to Oniguruma (extended mode drops whitespace and `#` comments up to
# a line feed; options hold to the end of their group): exponential on a run of `a` with no `b`.
EXTENDED_BACKTRACKING = [
    "(?x)(?:a|aa) +b", "(?x)(?:a|aa)\t+b", "(?x)(?:a|aa)\r\n\f +b", "(?x)(?:a|aa)#comment)(\n+b",
    "(?x)(?:a|aa)(?#c) +b", "(?x:(?:a|aa) +b)", "(?ix)(?:a|aa) +b", "(?x-i)(?:a|aa) +b", "(?x)(?:(?:a|aa) +b)",
    "(?:(?x)(?:a|aa) +b)", "(?-x)(?x)(?:a|aa) +b", "(?:a|aa)(?#c)+b", "(?C)(?:a|aa)+b", "(?L:(?:a|aa)+b)",
    "(?y{g})(?:a|aa)+b", "(?W)(?:a|aa)+b", "(?x)(?:a|aa) {2,}b",
]
# ... and these do not: the space is text (extended mode off, or scoped to a group that closed), a
# brace with a space inside is text, a class keeps its characters.
EXTENDED_SAFE = ["(?i-x)(?:a|aa) +b", "(?x)(?-x)(?:a|aa) +b", "(?:(?x))(?:a|aa) +b", "(?x:a)(?:a|aa) +b",
                 "(?x)(?:a|aa){2, }b", "(?x)[ #]+b", "(?x)a\\ +b"]
RUN_OF_A = "a" * 60 + "c"  # (?:a|aa)+b: about 1.6**60 ways; Oniguruma gives up after 10 million retries


def _engine_panics(pattern: str) -> bool:
    try:
        pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(RUN_OF_A)
    except BaseException as error:  # noqa: BLE001 - pyo3's PanicException is a BaseException
        if type(error).__name__ == "PanicException":
            return True
        raise
    return False


@pytest.mark.parametrize("pattern", EXTENDED_BACKTRACKING)
def test_extended_mode_and_option_groups_are_read_as_the_engine_reads_them(pattern):
    """`(?x)(?:a|aa) +b` passed: the rule read the space as text, the engine drops it."""
    assert _engine_panics(pattern)
    with pytest.raises(UnsafeRegex, match="nested repetition"):
        check_regex(pattern)


@pytest.mark.parametrize("pattern", EXTENDED_SAFE)
def test_what_extended_mode_leaves_as_text_still_passes(pattern):
    assert not _engine_panics(pattern)
    check_regex(pattern)


def test_every_whitespace_the_engine_drops_is_dropped_by_the_rule():
    """Every character the engine skips in extended mode (and after a `#` comment, every character that
    ends one) is one the rule skips too: no quantifier can reach a group behind the rule's back."""
    candidates = [chr(c) for c in range(0x3001) if chr(c).isspace()] + ["\x0b", "\x1c", "\u200b", "\ufeff"]
    for c in candidates:
        for pattern in (f"(?x)(?:a|aa){c}+b", f"(?x)(?:a|aa)#{c}+b"):
            if _engine_panics(pattern):
                with pytest.raises(UnsafeRegex):
                    check_regex(pattern)


_X_PIECES = ["(?x)", "(?-x)", "(?x:", "(?i:", "(?:", ")", " ", "#", "\n", "\\ ", "[ ]", "(?#)", "a", "|", "+",
             "\\Q", "\\E", "{2, }", "{2}"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_X_PIECES), max_size=8), st.lists(st.sampled_from(_X_PIECES[:14]), max_size=3))
def test_the_rule_refuses_whatever_the_engine_backtracks_on(before, between):
    """Differential, with the engine as the oracle: `(?:a|aa)` followed by option groups, comments and
    whitespace, then `+b`, inside any prefix: where Oniguruma backtracks past its limit (it joined
    the `+` to the group), the rule refused the pattern."""
    pattern = "".join(before) + "(?:a|aa)" + "".join(between) + "+b"
    try:
        Regex(pattern)
    except Exception:  # noqa: BLE001 - not a pattern the engine compiles: nothing runs
        return
    if _engine_panics(pattern):
        with pytest.raises(UnsafeRegex):
            check_regex(pattern)


def _tokenizer_with_split(tmp_path, pattern: str):
    """The sample BERT tokenizer with a Split pre-tokenizer of `pattern` before its own."""
    config = json.loads((SAMPLE_TOKENIZER / "tokenizer.json").read_text())
    split = json.loads(pre_tokenizers.Split(Regex(pattern), "isolated").__getstate__())
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, config["pre_tokenizer"]]}
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow
def test_a_panic_of_the_tokenizer_is_one_line_naming_the_input_and_the_tokenizer(tmp_path):
    """A pattern the rule accepts (adjacent quantifiers: polynomial, not exponential) can still exhaust
    Oniguruma's retry limit on one text, and `tokenizers` then panics: the job printed a pyo3
    PanicException with its backtrace. Now: one line naming the input and the tokenizer, exit 1."""
    import os
    import subprocess

    from tests.conftest import REPO

    tokenizer = _tokenizer_with_split(tmp_path, r"a*a*a*a*a*a*$")
    books = tmp_path / "books"
    books.mkdir()
    text = (SAMPLE_BOOKS / "drama__doctor_faustus.txt").read_text(encoding="utf-8-sig")[20_000:22_000]
    (books / "crafted.txt").write_text(text + " " + "a" * 2000 + "c and more words.\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "jobs.preprocess", "--input", str(books), "--output",
                           str(tmp_path / "out"), "--tokenizer", str(tokenizer), "--tokenizer_backend", "hf",
                           "--max_seq_length", "32", "--min_tokens", "4"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "PanicException" not in proc.stderr, proc.stderr[-3000:]
    assert "panicked at" not in proc.stderr and "stack backtrace" not in proc.stderr, proc.stderr[-3000:]
    failed = [line for line in proc.stderr.splitlines() if "the run failed" in line]
    assert len(failed) == 1, proc.stderr[-3000:]
    assert str(books / "crafted.txt") in failed[0] and str(tokenizer) in failed[0], failed[0]
    assert "panicked: Onig: Regex search error: retry-limit-in-match over" in failed[0], failed[0]
    assert failed[0].count("panicked") == 1, failed[0]


def test_the_hf_backend_names_a_panic():
    """`encode_segments` (the hf backend's one call into `tokenizers`) raises TokenizerPanic, an
    Exception, where `tokenizers` panics."""
    import pickle

    from pipeline.tokenizer.encode import tokenize_text
    from pipeline.tokenizer.errors import TokenizerPanic

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER / "tokenizer.json"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"a*a*a*a*a*a*$"), "isolated"),
                                                 tok.pre_tokenizer])
    with pytest.raises(TokenizerPanic, match="retry-limit-in-match over") as error:
        tokenize_text(tok, "some words " + "a" * 2000 + "c")
    assert str(pickle.loads(pickle.dumps(error.value))) == str(error.value)


@pytest.mark.parametrize("normalizer, probe", [
    (normalizers.Replace("e", "e" * 12_000), "'e'"),  # the finding: 1.48 GB for a 174 KB book
    (normalizers.Replace(Regex("[aeiou]"), "x" * 400), "'a'"),  # a class: its members are probed
    (normalizers.Replace(Regex(r"\p{Ll}"), "x" * 400), "'a'"),  # a property: the sample holds letters
    (normalizers.Replace("qz", "q" * 2_000), "'qz'"),  # a multi-character pattern: probed whole
    (normalizers.Sequence([normalizers.Lowercase()] + [normalizers.Replace("e", "eeee")] * 3), "'E'"),  # 64x
])
def test_a_normalizer_that_expands_text_is_refused(tmp_path, normalizer, probe):
    """Every check passed a normalizer that makes 12,000 characters of one; refused now at load,
    naming the probe that grew, before any text is tokenized (the job stops at its first line)."""
    from tests.conftest import run_preprocess

    config = json.loads((SAMPLE_TOKENIZER / "tokenizer.json").read_text())
    config["normalizer"] = json.loads(normalizer.__getstate__())
    with pytest.raises(TokenizerError, match=f"normalizer makes .* characters of {re.escape(probe)}") as error:
        TokenizerSpec.from_json(json.dumps(config))
    assert "over the 32x accepted" in str(error.value)
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(config))
    books = tmp_path / "books"
    books.mkdir()
    (books / "book.txt").write_text("the tree was green. " * 50)
    with pytest.raises(SystemExit) as exit_code:
        run_preprocess([books], tmp_path / "out", tokenizer=folder)
    assert exit_code.value.code == 2 and not (tmp_path / "out").exists()


def test_real_normalizers_grow_little():
    """NFKC (18 characters for U+FDFA), BERT's (spaces around CJK), a bounded Replace: accepted."""
    from pipeline.tokenizer.safety.normalizer_growth import check_growth

    for normalizer, expected in ((normalizers.NFKC(), 18), (normalizers.BertNormalizer(), 3),
                                 (normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                        normalizers.Replace(" ", "\u2581")]), 2),
                                 (normalizers.Replace("e", "e" * 20), 20)):
        assert check_growth(normalizer.normalize_str, json.loads(normalizer.__getstate__())) == expected


RUST_PANIC_REPORT = """\
thread '<unnamed>' (5533) panicked at /root/.cargo/registry/src/onig-6.5.3/src/lib.rs:647:23:
Onig: Regex search error: retry-limit-in-match over
stack backtrace:
   0: __rustc::rust_begin_unwind
   1: <onig::Regex>::search_with_encoding::<&str>
             at /tmp/python-build/Objects/call.c:299:12
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.
"""


def test_the_workers_rust_panic_report_stays_in_their_log():
    """Rust's panic hook prints its report (with RUST_BACKTRACE=1, 20 lines and more) on the worker's
    stderr: the console shows the job's one line instead, the workers' log file keeps the report."""
    from pipeline.console.logs import worker_lines

    assert worker_lines(RUST_PANIC_REPORT + "a library's warning\n") == ["a library's warning"]


def test_a_normalizer_that_panics_on_a_probe_is_refused_in_one_line():
    """A polynomial pattern (accepted by the regex rule) that gives up on a prepended run of `a`:
    `tokenizers` panics on the load-time probe; a TokenizerError, not a PanicException with a
    Rust backtrace, comes out."""
    config = json.loads((SAMPLE_TOKENIZER / "tokenizer.json").read_text())
    normalizer = normalizers.Sequence([normalizers.Prepend("a" * 60 + "c"),
                                       normalizers.Replace(Regex("a*a*a*a*a*a*$"), "x")])
    config["normalizer"] = json.loads(normalizer.__getstate__())
    with pytest.raises(TokenizerError, match="normalizer: the tokenizer panicked: .*retry-limit-in-match over"):
        TokenizerSpec.from_json(json.dumps(config))
