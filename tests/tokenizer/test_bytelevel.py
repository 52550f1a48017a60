"""The byte-level BPE fast path gives exactly the real tokenizer's ids, for small tokenizers trained
by `tokenizers` and configured as roberta-base, ModernBERT, GPT-2 (with add_prefix_space), GPT-2 with
BPE affixes, and Llama-3/OLMo-2 (Split of the cl100k regex + ByteLevel, ignore_merges): a bounded
slice of every shared book, the hostile text, and random strings weighted to the risky classes."""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline.kernels.tokenizer.bytelevel.encode import (
    GPT2_PATTERN,
    LETTER,
    LLAMA3_PATTERN,
    NUMBER,
    OTHER,
    SPACE,
    ByteLevelCache,
)
from pipeline.tokenizer.bytelevel.fast import BYTE_CHARS, _cached_classes
from pipeline.tokenizer.fast import FastTokenizer, UnsupportedTokenizer, choose_backend
from tests.conftest import BOOKS
from tests.tokenizer.test_fast import HOSTILE

TOKENIZERS = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
NAMES = ("roberta", "modernbert", "gpt2", "gpt2_affixes", "llama3")
BOOK_SLICE = 3_000  # characters from the middle of every book: the whole corpus, bounded


@functools.lru_cache(maxsize=8)
def tokenizer_json(name: str) -> str:
    """A test tokenizer by name: `NAME.json` (byte-level ones) or `NAME/tokenizer.json` (SentencePiece ones)."""
    path = TOKENIZERS / f"{name}.json"
    return (path if path.exists() else TOKENIZERS / name / "tokenizer.json").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=8)
def pair(name: str) -> tuple[Tokenizer, FastTokenizer]:
    real = Tokenizer.from_str(tokenizer_json(name))
    real.encode_special_tokens = True  # as the job builds it: special-token strings are text
    return real, FastTokenizer(real, tokenizer_json(name))


def assert_same(name: str, text: str) -> None:
    assert_same_with(pair(name)[1], name, text)


def assert_same_with(fast: FastTokenizer, name: str, text: str) -> None:
    real = pair(name)[0]
    expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)
    got = fast.encode(text)
    if not np.array_equal(got, expected):
        k = next((i for i in range(min(len(got), len(expected))) if got[i] != expected[i]),
                 min(len(got), len(expected)))
        raise AssertionError(f"{name}: first difference at token {k} of {len(expected)}: "
                             f"real {[real.id_to_token(int(i)) for i in expected[k:k + 4]]} "
                             f"fast {[real.id_to_token(int(i)) for i in got[k:k + 4]]} in {text[:200]!r}")


@pytest.mark.parametrize("name", NAMES)
def test_every_book_slice_and_the_hostile_text_give_the_real_ids(name):
    real, fast = pair(name)
    assert fast.family.name == "byte-level BPE"
    texts = [HOSTILE]
    for path in sorted(BOOKS.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        middle = len(text) // 2
        texts.append(text[middle: middle + BOOK_SLICE])
    texts.append("\n".join(texts))  # one document of all of them, with its line breaks
    for text in texts:
        assert_same(name, text)


_RISKY = [
    "\u0301", "\u0308", "\u20dd", "e\u0301", "\ufb01", "\uff21", "\u2163", "\u00bd", "\u2460", "\u3000", "\u00a0",
    "\u2028", "\u2029", "\u200b", "\u200d", "\ufeff", "\u00ad", "\x1c", "\x1f", "\x85", "\x00", "\x7f", "\t", "\r",
    "\n", "\n\n", "  ", "   ", " \n ", "\u1100\u1161\u11a8", "\ud55c", "\U0001F600", "\U0001F468\u200d\U0001F469",
    "\U00010400", "\U0001D4B3", "\u017f", "\u212a", "\u0130", "\u0131", "\u03c2", "'s", "'S", "'t", "'T", "'re",
    "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll", "'d", "'D", "'\u017f", "''s", " 's", "'",
    "<s>", "</s>", "<mask>", "<pad>", "[CLS]", "[MASK]", "<|endoftext|>", "<|begin_of_text|>", "|||IP_ADDRESS|||",
    "1", "12", "123", "1234567", "3.14", "1,000", "\u0661\u0662\u0663", "\u00b2", "!!!", "...", "?!", "--", "(",
    ")", "\u201c", "\u2019", "#", "##", "</w>", "\u0120", "\u010a", "\u5b57", "\u3002", "\u05e9", "\u0645",
]
_WORDS = ["the", "The", "THE", "word", "don", "we", "you", "it", "Hello", "caf\u00e9", "na\u00efve", "x" * 40,
          "ab" * 150, "\u00e9" * 90]


@st.composite
def risky_text(draw) -> str:
    parts = draw(st.lists(st.one_of(st.sampled_from(_RISKY), st.sampled_from(_WORDS),
                                    st.text(max_size=6), st.sampled_from([" ", "\n", ""])), max_size=40))
    return "".join(parts)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=risky_text())
def test_random_risky_strings_give_the_real_ids(name, text):
    assert_same(name, text)


_LETTERS = "etaoinshrdlu" + "ETAOIN" + "\u00e9\u00df\u5b57\u0436\U0001D4B3"


@functools.lru_cache(maxsize=1)
def _book_words() -> list[str]:
    """Distinct words of a shared book, of every length (real words: few ids each, so they are cached)."""
    text = sorted(BOOKS.glob("*.txt"))[0].read_text(encoding="utf-8", errors="replace")
    return sorted(set(re.findall(r"[A-Za-z]+", text)))


def _word_lengths_text(seed: int) -> str:
    """Words of 1 to 30 bytes (both sides of the word cache's 8/16/24-byte key boundaries; book words
    and random ones with multi-byte letters), each next to a twin that differs in its last letter
    only, the two repeated in turn (so a four-record cache hits, and twins meet in one set), then NUL,
    digit or contraction runs."""
    rng = np.random.default_rng(seed)
    book = _book_words()
    seps = ["\n", "\x00", " 12345", ",", "'s", "  "]
    parts = []
    for i in range(300):
        if i % 3:  # a book word, or two (the long words the 16-24-byte keys hold)
            word = "".join(book[int(k)] for k in rng.integers(len(book), size=i % 3))
        else:
            word = ""
            target = int(rng.integers(1, 31))
            while len(word.encode()) < target:
                word += _LETTERS[int(rng.integers(len(_LETTERS)))]
        twin = word[:-1] + "xyz"[int(rng.integers(3))]
        parts.append(f" {word} {twin} {word} {twin} {word}{seps[i % len(seps)]}")
    return "".join(parts)


@pytest.mark.parametrize("name", ["roberta", "llama3", "gpt2_affixes"])
def test_a_tiny_word_cache_that_evicts_every_word_gives_the_real_ids(name):
    """Four cache records and a word table of two sets for hundreds of words: every lookup collides,
    evicts or hits a neighbour's set, and hits must still copy the right ids (1 to many per word,
    words of every key length)."""
    real, _ = pair(name)
    fast = FastTokenizer(real, tokenizer_json(name))
    fast._impl.cache = ByteLevelCache(fast._impl.tables, sets=2, front_sets=2)
    for seed in range(3):
        text = _word_lengths_text(seed)
        expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)
        for _ in range(2):
            np.testing.assert_array_equal(fast.encode(text), expected)
    for sizes in ({"sets": 3}, {"front_sets": 3}):
        with pytest.raises(ValueError, match="power of two"):
            ByteLevelCache(fast._impl.tables, **sizes)


def test_the_class_table_is_the_regex_engines():
    """Spot checks of the probed \\p{L} / \\p{N} / \\s table: what Python and onig agree on."""
    classes = _cached_classes()
    for char, kind in (("a", LETTER), ("\u00e9", LETTER), ("\u5b57", LETTER), ("\U0001D4B3", LETTER),
                       ("7", NUMBER), ("\u2163", NUMBER), ("\u00bd", NUMBER), (" ", SPACE), ("\u3000", SPACE),
                       ("\u2028", SPACE), ("\x85", SPACE), ("!", OTHER), ("\u0301", OTHER), ("\x1c", OTHER),
                       ("\U0001F600", OTHER), ("\u200b", OTHER)):
        assert classes[ord(char)] == kind, hex(ord(char))


def _variant(name: str, change) -> str:
    config = json.loads(tokenizer_json(name))
    change(config)
    return json.dumps(config)


@pytest.mark.parametrize("name", NAMES)
def test_auto_picks_fast_for_every_byte_level_tokenizer(name):
    assert choose_backend("auto", tokenizer_json(name)) == ("fast", [])


@pytest.mark.parametrize("change, named", [
    (lambda c: c.update(normalizer={"type": "NFD"}), "normalizer NFD"),
    (lambda c: c["pre_tokenizer"].update(use_regex=False), "ByteLevel without its regex"),
    (lambda c: c["model"].update(dropout=0.1), "BPE dropout 0.1"),
    (lambda c: c.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+?"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
     "Split 1 of 1: lazy or possessive quantifier"),
])
def test_unsupported_byte_level_settings_are_named(change, named):
    config = _variant("roberta", change)
    backend, why = choose_backend("auto", config)
    assert backend == "hf" and any(named in reason and reason.startswith("byte-level BPE family: ")
                                   for reason in why), why
    with pytest.raises(UnsupportedTokenizer, match=named):
        choose_backend("fast", config)


def test_a_split_of_the_gpt2_pattern_is_covered_too():
    config = _variant("roberta", lambda c: c.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}))
    real = Tokenizer.from_str(config)
    real.encode_special_tokens = True
    fast = FastTokenizer(real, config)
    text = HOSTILE[:4000] + " it's  done\n\n  'LL"
    np.testing.assert_array_equal(fast.encode(text), real.encode(text, add_special_tokens=False).ids)


def test_a_tokenizer_no_family_claims_is_named():
    config = _variant("roberta", lambda c: c.update(pre_tokenizer={"type": "Whitespace"}))
    backend, why = choose_backend("auto", config)
    assert backend == "hf" and len(why) == 1
    assert why[0].startswith("no fast family for a model BPE with pre-tokenizer Whitespace (fast families: WordPiece")


@pytest.mark.parametrize("ignore_merges, expected", [(False, ["a", "bc"]), (True, ["abc"])])
def test_a_vocabulary_entry_the_merges_never_build_is_not_one_token(ignore_merges, expected):
    """`abc` is in the vocabulary, but `b c` outranks `a b` and no merge joins `a` and `bc`: BPE
    makes `a bc`, unless `ignore_merges` looks the whole word up first. The one-token-word table
    must follow the model, not the vocabulary."""
    from tokenizers import models, pre_tokenizers

    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6}
    real = Tokenizer(models.BPE(vocab=vocab, merges=[("b", "c"), ("a", "b"), ("ab", "c")],
                                ignore_merges=ignore_merges))
    real.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    fast = FastTokenizer(real, real.to_str())
    ids = fast.encode("abc")
    assert [real.id_to_token(int(i)) for i in ids] == expected
    np.testing.assert_array_equal(ids, real.encode("abc", add_special_tokens=False).ids)


@pytest.mark.parametrize("name", ["roberta", "llama3", "gpt2_affixes"])
def test_the_byte_pair_table_holds_the_merges_of_two_bytes(name):
    """A word's first lookups read `byte_pairs`: for each two bytes, the rank and result of the
    model's merge of them (none elsewhere); no table where a byte's id depends on its place."""
    from pipeline.kernels.tokenizer.bytelevel.encode import NO_MERGE

    model = json.loads(tokenizer_json(name))["model"]
    table = pair(name)[1]._impl.tables.byte_pairs
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        assert table.shape == (0,)
        return
    char_bytes = {c: b for b, c in BYTE_CHARS.items()}
    expected = np.full(65536, NO_MERGE, dtype=np.uint64)
    for rank, merge in enumerate(model["merges"]):
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        if len(a) == 1 and len(b) == 1 and expected[char_bytes[a] * 256 + char_bytes[b]] == NO_MERGE:
            expected[char_bytes[a] * 256 + char_bytes[b]] = rank | (model["vocab"][a + b] << 32)
    assert (expected != NO_MERGE).sum() > 100
    np.testing.assert_array_equal(table, expected)


_CJK = "\u5b57\u6587\u672c\u8a9e\u4e2d\u65e5\u570b\u4eba\u5927\u5b78"


def test_words_of_many_ids_are_cached_whole_across_both_ways_of_a_set():
    """CJK runs of 4 to 8 characters (12 to 24 bytes, more ids than one record holds) are cached
    as wide entries spanning both records of a set; in a four-record cache they meet short words
    in the same sets (a short word must drop a wide entry, never shift half of it into way 1, and
    way 1 must not be read as a record while a wide entry fills it). Hits give the real ids."""
    real, _ = pair("roberta")
    fast = FastTokenizer(real, tokenizer_json("roberta"))
    fast._impl.cache = ByteLevelCache(fast._impl.tables, sets=2, front_sets=2)
    rng = np.random.default_rng(7)
    words = ["".join(_CJK[int(k)] for k in rng.integers(len(_CJK), size=int(rng.integers(4, 9))))
             for _ in range(40)]
    text = " ".join(f"{w} the {w} a {w}, {w}" for w in words) + " " + " ".join(words)
    expected = np.asarray(real.encode(text, add_special_tokens=False).ids, dtype=np.int32)
    assert max(len(real.encode(w).ids) for w in words) > 9  # wide entries are made
    for _ in range(2):
        np.testing.assert_array_equal(fast.encode(text), expected)
    big = FastTokenizer(real, tokenizer_json("roberta"))  # a large cache keeps them: the second pass hits
    for _ in range(2):
        np.testing.assert_array_equal(big.encode(text), expected)
    counts = (big._impl.cache.records[:, 3] >> np.uint64(8)) & np.uint64(0xFF)
    assert (counts > 9).any()


def test_a_word_found_again_stays_cached_while_new_words_take_turns_in_its_set():
    """Three words of one set, in turn (A, B, C, A, ...): a new word takes way 1 and a hit in way 1
    moves to way 0, so the word found again is kept (a new word that pushed way 0 into way 1 dropped
    the word to come next: every lookup a miss). Each hit copies the ids that word was given."""
    from pipeline.kernels.tokenizer.bytelevel.word_cache import PackedWordCache, cached_ids, remember

    records = PackedWordCache.empty(2).records
    ids = {word: np.arange(10 * word, 10 * word + count, dtype=np.int32) for word, count in ((1, 3), (2, 1), (3, 9))}

    def find(word):
        out = np.zeros(16, dtype=np.int32)
        done = cached_ids(records, 0, np.uint64(word), np.uint64(0), np.uint64(0), 5, out, 0)
        return None if done < 0 else out[:done].tolist()

    def keep(word):
        remember(records, 0, np.uint64(word), np.uint64(0), np.uint64(0), 5, ids[word], 0, ids[word].shape[0])

    keep(1)
    keep(2)
    keep(3)  # A is in way 0, B (way 1) gives way to C
    assert find(1) == ids[1].tolist() and find(2) is None and find(3) == ids[3].tolist()
    keep(2)  # C was hit in way 1, so it is in way 0 now: B takes way 1 from A
    assert find(3) == ids[3].tolist() and find(2) == ids[2].tolist() and find(1) is None
    assert records[2:].sum() == 0  # the other set is never touched


def test_a_word_at_the_very_end_of_the_text_reads_no_byte_past_it():
    """The kernel reads 8 bytes at a time but never past the text: each text (ending in a word of
    1 to 30 bytes, letters or not) is placed right before a page the process may not read, so a
    read past its end would crash this test."""
    import ctypes
    import mmap

    from pipeline.kernels.tokenizer.bytelevel.encode import encode_bytes

    real, fast = pair("llama3")
    page = mmap.PAGESIZE
    area = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(base + page), page, 0) == 0  # PROT_NONE
    try:
        for end in ["a", "ab", "word", "abcdefgh", "abcdefghi", "\u00e9t\u00e9", "x" * 16, "x" * 17, "y" * 24,
                    "z" * 30, "12", "!!", "\n", "  ", _CJK[:3], "it's", "l" + "\u00e9" * 11]:
            data = ("hello " + end).encode()
            area[page - len(data):page] = data
            view = np.frombuffer(area, dtype=np.uint8, count=len(data), offset=page - len(data))
            view.flags.writeable = False  # as the str's UTF-8 view is (one compiled kernel, not two)
            ids, fallback = encode_bytes(view, fast.tables, fast._impl.cache)
            assert fallback.shape[0] == 0
            np.testing.assert_array_equal(ids, real.encode(data.decode(), add_special_tokens=False).ids)
    finally:
        libc.mprotect(ctypes.c_void_p(base + page), page, 3)  # PROT_READ | PROT_WRITE, before the map is freed


# What the pre-tokenizer's dispatch decides from a word's first two characters: ASCII and other
# punctuation, every kind of whitespace and newline, next to letters (ASCII or not), digits and
# apostrophes (contractions come before every other alternative), in runs and alone.
_BOUNDARY_PARTS = [*"!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~", "'", "'s", "'S", "'ll", "'Re", "''", "\u2019", "\u2019s",
                   "\u201c", "\u201d", "\u2014", "\u2026", "\u00ab", "\u00a1", "\u0301", " ", "  ", "\t", " \t", "\n",
                   "\n\n", "\r", "\r\n", " \n", "\n ", "\u3000", "\u00a0", "\x0b", "\x0c", "\x85", "\u2028", "a", "I",
                   "the", "Word", "\u00e9", "\u00df", "\u5b57", "\u0436\u0438", "\U0001D4B3", "1", "12", "1234",
                   "\u0663", "\u00bd"]


@st.composite
def boundary_text(draw) -> str:
    return "".join(draw(st.lists(st.sampled_from(_BOUNDARY_PARTS), max_size=30)))


@functools.lru_cache(maxsize=2)
def _word_end_marking(pattern: str) -> tuple[Tokenizer, FastTokenizer]:
    """A byte-level BPE of the pattern whose ids show every word end: no merges, and each byte has
    a second id as a word's last symbol (`end_of_word_suffix`), so the ids are equal only when the
    words are (ids of real models can hide a wrong cut where no merge crosses it, as `\\r` `a`)."""
    from tokenizers import Regex, models, pre_tokenizers

    chars = list(BYTE_CHARS.values())
    vocab = {**{c: i for i, c in enumerate(chars)}, **{c + "</w>": 256 + i for i, c in enumerate(chars)}}
    real = Tokenizer(models.BPE(vocab=vocab, merges=[], end_of_word_suffix="</w>"))
    if pattern == GPT2_PATTERN:
        real.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        real.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return real, FastTokenizer(real, real.to_str())


def _assert_same_words(pattern: str, text: str) -> None:
    real, fast = _word_end_marking(pattern)
    expected = real.encode(text, add_special_tokens=False).ids
    if fast.encode(text).tolist() != expected:
        raise AssertionError(f"{text!r}: words {[w for w, _ in real.pre_tokenizer.pre_tokenize_str(text)]} "
                             f"ids {expected} got {fast.encode(text).tolist()}")


# One character of each kind the dispatch tells apart: ASCII and other letters (and contraction
# letters), numbers, punctuation, apostrophes, a combining mark, spaces, tab, newlines, other whitespace.
_REPRESENTATIVES = "asZ\u00e9\u5b571\u0663,.'\u2019\u201c\u0301 \t\n\r\u3000\x85\x0b"


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN], ids=["gpt2", "llama3"])
def test_every_three_characters_are_cut_as_the_regex_cuts(pattern):
    """Every string of three representative characters (20^3): the kernel's words are the real
    pre-tokenizer's (`_word_end_marking`)."""
    for chars in itertools.product(_REPRESENTATIVES, repeat=3):
        _assert_same_words(pattern, "".join(chars))


@pytest.mark.parametrize("name", ["roberta", "llama3"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=boundary_text())
def test_punctuation_whitespace_and_their_neighbours_are_cut_as_the_regex_cuts(name, text):
    """Longer runs of them (GPT-2 and Llama-3 patterns): the real pre-tokenizer's words and ids."""
    _assert_same_words(GPT2_PATTERN if name == "roberta" else LLAMA3_PATTERN, text)
    assert_same(name, text)


@pytest.mark.parametrize("name", ["roberta", "llama3"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.one_of(boundary_text(), st.sampled_from(["ab" * 150, " " * 300, "\u00e9" * 140])),
                     max_size=4).map("".join), window=st.integers(1, 48))
def test_a_text_done_in_windows_gives_the_ids_of_the_whole(name, text, window):
    """A long text is tokenized a window of bytes a kernel call, each call going on where the last
    one's last word ended (words may run past a window's end; words the real model takes, over
    MAX_KERNEL_WORD bytes, land in any window): the ids are those of the whole text."""
    real, _ = pair(name)
    fast = FastTokenizer(real, tokenizer_json(name))
    fast._impl.window = window
    assert_same_with(fast, name, text)
