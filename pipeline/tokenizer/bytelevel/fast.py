"""The fast path of the byte-level BPE family (GPT-2, RoBERTa, ModernBERT, Llama-3 and OLMo style).

`bytelevel_support` reads the tokenizer JSON and lists what the kernel does not reproduce. Covered:
no normalizer (or an empty `Sequence` of them), or NFC / NFKC (`normal_forms`); a `ByteLevel`
pre-tokenizer with its regex (any `add_prefix_space`), or a chain of `Split`s followed by a
regex-less `ByteLevel` without prefix space: one Isolated `Split` of the GPT-2, Llama-3/cl100k,
Qwen or Qwen3.6 pattern (exactly `PATTERNS`' strings) runs on their written-out scanners, any other
chain whose regexes `split_program` compiles (DeepSeek's) on the compiled-program matcher; a `BPE`
model without dropout (merges, `ignore_merges`, `continuing_subword_prefix`, `end_of_word_suffix`;
a byte without an initial id, hence `[UNK]` or byte fallback, goes to the real model word by word).
Non-special added tokens are split out before this encoder (`pipeline.tokenizer.added_tokens`);
special ones the job encodes as plain text.

The regex's character classes are asked of the tokenizer's own regex engine (onig) for every code
point, once per `tokenizers` version (cached on disk like the WordPiece table).
"""

from __future__ import annotations

import ctypes
import itertools
import json
from functools import lru_cache

import numpy as np
import tokenizers
from tokenizers import Regex, Tokenizer
from tokenizers.pre_tokenizers import Split

from pipeline.kernels.common.hash_table import ByteTable
from pipeline.kernels.common.string_arrays import StringArrays
from pipeline.kernels.tokenizer.bytelevel.encode import (
    GPT2_PATTERN,
    LETTER,
    N_CODE_POINTS,
    NUMBER,
    OTHER,
    PATTERNS,
    SPACE,
    WINDOW_BYTES,
    ByteLevelCache,
    ByteLevelTables,
    byte_pair_table,
    encode_bytes,
    merge_table_of,
)
from pipeline.kernels.tokenizer.bytelevel.pretokenize import MARK_LETTERS
from pipeline.kernels.tokenizer.bytelevel.regex_program import NO_PROGRAM, PROGRAM
from pipeline.kernels.tokenizer.bytelevel.tables import merge_ids, merge_parts, one_token_words
from pipeline.kernels.tokenizer.bytelevel.word_cache import PackedWordCache
from pipeline.kernels.tokenizer.bytelevel.word_table import (
    FRONT_BYTES,
    empty_table,
    grown_table,
    seed_words,
    seeded_table,
)
from pipeline.tokenizer.bytelevel.normal_forms import NormalForm, normal_form
from pipeline.tokenizer.bytelevel.split_program import SplitProgram, Unsupported, compile_chain
from pipeline.tokenizer.components import BYTE_CHARS, CHAR_BYTES
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.parsed import kept, parsed
from pipeline.tokenizer.table_cache import cached_arrays

FAMILY = "byte-level BPE"
_CLASS_FORMAT = 1
_TO_CHARS = [BYTE_CHARS[b] for b in range(256)]
_SPACE = np.array([32], dtype=np.uint8)
MASK_CLASSES = np.array([LETTER if chr(b).isascii() and chr(b).isalpha() else NUMBER if chr(b).isdigit()
                         else SPACE if b in (9, 10, 11, 12, 13, 32) else OTHER for b in range(128)], dtype=np.uint8)
"""The ASCII classes `class_masks64` sees (the 64-byte pre-tokenizer runs only where the regex engine agrees)."""


def _utf8_reader():
    """CPython's `PyUnicode_AsUTF8AndSize` (a str's UTF-8, computed once and kept with the str; for
    an ASCII str its own characters), or None on an interpreter without it."""
    try:
        function = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    except AttributeError:
        return None
    function.argtypes = [ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t)]
    function.restype = ctypes.c_void_p
    return function


_AS_UTF8 = _utf8_reader()


def utf8_view(text: str) -> np.ndarray:
    """uint8, shape (n,): the UTF-8 of `text` without a copy where CPython keeps one (a read-only
    view, valid while `text` lives), else `text.encode()`. Raises UnicodeEncodeError on a lone
    surrogate, as `encode` does."""
    if _AS_UTF8 is None or not text:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    size = ctypes.c_ssize_t()
    address = _AS_UTF8(text, ctypes.byref(size))  # raises what encode() raises (ctypes passes the error on)
    view = np.frombuffer((ctypes.c_uint8 * size.value).from_address(address), dtype=np.uint8)
    view.flags.writeable = False
    return view


def byte_level_string(data: bytes) -> str:
    """`data` in the byte-level alphabet (what the BPE model sees of a word)."""
    return "".join([_TO_CHARS[b] for b in data])


def pre_tokenizer_shape(config: dict) -> tuple[str | None, bool, list[str]]:
    """(regex pattern or None, add_prefix_space, problems) of a byte-level pre-tokenizer: the
    pattern is one of PATTERNS (GPT-2's, Llama-3's, Qwen's, Qwen3.6's: their written-out scanners),
    None for a compiled Split chain (`split_chain`) or a shape the kernel does not run."""
    pre = config.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        if not pre.get("use_regex", True):
            return None, False, ["ByteLevel without its regex (the whole text is one word)"]
        return GPT2_PATTERN, bool(pre.get("add_prefix_space", True)), []
    steps = pre.get("pretokenizers") or [] if pre.get("type") == "Sequence" else []
    if len(steps) >= 2 and all(step.get("type") == "Split" for step in steps[:-1]) \
            and steps[-1].get("type") == "ByteLevel":
        *splits, level = steps
        problems = []
        if level.get("use_regex", True):
            problems.append("ByteLevel with its regex after a Split")
        if level.get("add_prefix_space", True):
            problems.append("ByteLevel add_prefix_space after a Split")
        pattern = (splits[0].get("pattern") or {}).get("Regex")
        if len(splits) == 1 and pattern in PATTERNS and splits[0].get("behavior") == "Isolated" \
                and not splits[0].get("invert"):
            return pattern, False, problems
        problems += _compiled(json.dumps(splits, sort_keys=True))[1]
        return None, False, problems
    return None, False, [f"pre-tokenizer {pre.get('type')} (only ByteLevel, or Splits then ByteLevel)"]


@lru_cache(maxsize=8)
def _compiled(splits_json: str) -> tuple[SplitProgram | None, list[str]]:
    """(the compiled chain, []) of the `Split` steps (JSON), or (None, why not: the Split and its construct)."""
    splits = json.loads(splits_json)
    try:
        return compile_chain(splits), []
    except Unsupported as error:
        return None, [f"Split {error.level + 1} of {len(splits)}: {error}"]


def split_chain(config: dict) -> SplitProgram | None:
    """The compiled Split chain of a byte-level tokenizer the kernel runs as a program, else None."""
    steps = (config.get("pre_tokenizer") or {}).get("pretokenizers") or []
    if pre_tokenizer_shape(config)[0] is not None or pre_tokenizer_shape(config)[2]:
        return None
    return _compiled(json.dumps(steps[:-1], sort_keys=True))[0]


def bytelevel_support(config: dict) -> list[str]:
    """What the fast path cannot reproduce of a byte-level BPE tokenizer (empty when covered)."""
    problems = normal_form(config.get("normalizer"))[1]
    problems += pre_tokenizer_shape(config)[2]
    model = config.get("model") or {}
    if model.get("type") != "BPE":
        problems.append(f"model {model.get('type')} (only BPE)")
    if model.get("dropout"):
        problems.append(f"BPE dropout {model['dropout']}")
    plain_added = [t["content"] for t in config.get("added_tokens", []) if not t.get("special")]
    if plain_added:
        problems.append(f"{len(plain_added)} non-special added tokens (e.g. {plain_added[0]!r})")
    return problems


def _all_code_points() -> str:
    cps = np.arange(N_CODE_POINTS, dtype="<u4")
    cps = cps[(cps < 0xD800) | (cps >= 0xE000)]
    return cps.tobytes().decode("utf-32-le")


def probe_classes() -> np.ndarray:
    """uint8, shape (N_CODE_POINTS,): how the tokenizers regex engine classes each code point
    (`\\p{L}`, `\\p{N}`, `\\s`, else OTHER). One pass of `\\p{L}+|\\p{N}+|\\s+` over every code point
    finds the runs; a second over the first character of each run says which class it is."""
    text = _all_code_points()
    classes = np.full(N_CODE_POINTS, OTHER, dtype=np.uint8)
    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    runs = Split(Regex(r"\p{L}+|\p{N}+|\s+"), behavior="removed", invert=True).pre_tokenize_str(text)
    firsts = "".join(piece[0] for piece, _ in runs)
    kinds = np.full(len(runs), OTHER, dtype=np.uint8)
    for pattern, kind in ((r"\p{L}", LETTER), (r"\p{N}", NUMBER), (r"\s", SPACE)):
        for _, (start, _stop) in Split(Regex(pattern), behavior="removed", invert=True).pre_tokenize_str(firsts):
            kinds[start] = kind
    for kind, (_, (start, stop)) in zip(kinds, runs):
        classes[cps[start:stop]] = kind
    return classes


def _cached_classes() -> np.ndarray:
    """The probed class table, kept on disk per `tokenizers` version (probing takes a few seconds)."""
    key = f"{_CLASS_FORMAT}|{tokenizers.__version__}"
    return cached_arrays("regex-classes", key, ("classes",), lambda: {"classes": probe_classes()})["classes"]


def probe_marks() -> np.ndarray:
    """bool, shape (N_CODE_POINTS,): the code points the tokenizers regex engine matches with `\\p{M}`."""
    text = _all_code_points()
    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    marks = np.zeros(N_CODE_POINTS, dtype=bool)
    for _, (start, stop) in Split(Regex(r"\p{M}+"), behavior="removed", invert=True).pre_tokenize_str(text):
        marks[cps[start:stop]] = True
    return marks


def _marks_as_letters() -> np.ndarray:
    """The class table with every mark (`\\p{M}`, class OTHER) a LETTER, kept on disk like `_cached_classes`."""

    def build() -> dict[str, np.ndarray]:
        classes = _cached_classes().copy()
        classes[probe_marks() & (classes == OTHER)] = LETTER
        return {"classes": classes}

    key = f"{_CLASS_FORMAT}|marks as letters|{tokenizers.__version__}"
    return cached_arrays("regex-classes", key, ("classes",), build)["classes"]


def pattern_classes(pattern: str | None) -> np.ndarray:
    """The class table a scanner pattern runs on: Qwen3.6's counts marks as letters (`MARK_LETTERS`)."""
    if pattern in PATTERNS and PATTERNS[pattern] in MARK_LETTERS:
        return _marks_as_letters()
    return _cached_classes()


def probe_fold(pattern: str) -> np.ndarray:
    """int64, shape (0x2200,): the contraction letter each code point stands for in the pattern's
    case-insensitive contractions (asked of the regex itself), 0 for none."""
    fold = np.zeros(0x2200, dtype=np.int64)
    if pattern not in PATTERNS or pattern == GPT2_PATTERN:  # GPT-2's contractions are case-sensitive
        return fold
    split = Split(Regex(pattern), behavior="isolated")
    forms = ("s", "t", "m", "d", "re", "ve", "ll")
    letters = "".join(sorted(set("".join(forms))))
    for cp in range(fold.shape[0]):
        char = chr(cp)
        if not any(variant in letters for variant in (char.casefold(), char.lower(), char.upper().lower())):
            continue
        for form in forms:
            for position, letter in enumerate(form):
                word = "'" + form[:position] + char + form[position + 1:]
                if [p for p, _ in split.pre_tokenize_str(word + "a")] == [word, "a"]:
                    fold[cp] = ord(letter)
    return fold


_BYTE_OF_CHAR = np.full(max(map(ord, CHAR_BYTES)) + 1, 256, dtype=np.int16)
_BYTE_OF_CHAR[[ord(c) for c in CHAR_BYTES]] = list(CHAR_BYTES.values())
"""The byte each character of the ByteLevel alphabet stands for, 256 for a character outside it."""


def _merge_arrays(merges: list, strings: StringArrays, ids: np.ndarray, prefix: str) -> tuple[np.ndarray, ...]:
    """(a, b, rank, new) int64 arrays of the model's merges (`"a b"` strings or [a, b] pairs) as ids
    of the vocabulary `strings` (ids: each string's id), new the id of a + b less its prefix.

    Raises:
        UnsupportedTokenizer: a merge with a part or result outside the vocabulary, or a string
            without exactly one space (`tokenizers` refuses both files)."""
    if merges and isinstance(merges[0], str):
        texts = StringArrays.of(merges)
        parts = merge_parts(texts.utf8, texts.utf8_starts[:-1], texts.utf8_starts[1:])
    else:
        texts = StringArrays.of(list(itertools.chain.from_iterable(merges)))
        parts = np.stack((texts.utf8_starts[:-1:2], texts.utf8_starts[1::2],
                          texts.utf8_starts[1::2], texts.utf8_starts[2::2]), axis=1) if merges \
            else np.zeros((0, 4), dtype=np.int64)
    vocab = ByteTable.of_arrays(strings.utf8, strings.utf8_starts[:-1], np.diff(strings.utf8_starts), ids)
    found = merge_ids(texts.utf8, np.ascontiguousarray(parts), len(prefix.encode()), vocab.blob, vocab.starts,
                      vocab.lengths, vocab.ids, vocab.slots)
    bad = np.flatnonzero((found < 0).any(axis=1))
    if bad.shape[0]:
        raise UnsupportedTokenizer([f"merge {int(bad[0]) + 1} ({merges[int(bad[0])]!r}) is not two tokens of the "
                                    "vocabulary whose join is one"], FAMILY)
    return found[:, 0], found[:, 1], np.arange(found.shape[0], dtype=np.int64), found[:, 2]


def _raw_bytes(strings: StringArrays, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the strings' characters as the bytes they stand for in the ByteLevel alphabet (uint8, one a
    character; 0 for one outside it), whether string i's characters before char index stops[i] are
    all in the alphabet)."""
    points = strings.code_points
    byte = _BYTE_OF_CHAR[np.minimum(points, _BYTE_OF_CHAR.shape[0] - 1)]
    outside = (byte == 256) | (points >= _BYTE_OF_CHAR.shape[0])
    inside = strings.none_in_range(outside, strings.char_starts[:-1], stops)
    return np.where(outside, 0, byte).astype(np.uint8), inside


def _one_token_words(strings: StringArrays, raw: np.ndarray, suffix: str, ignore_merges: bool, initial: np.ndarray,
                     merges: np.ndarray, byte_pairs: np.ndarray, by_bytes: ByteTable) -> np.ndarray:
    """The word table's seeds (`word_table.seed_words`): every word of up to FRONT_BYTES bytes that is
    one token. Each token's text (less the end-of-word suffix) is tried as a word, and the kernel's
    own BPE says (`tables.one_token_words`), so the table of them never changes an id."""
    starts, stops = strings.char_starts[:-1], strings.char_starts[1:].copy()
    if suffix:  # a token that ends with the suffix is tried without it
        stops[strings.ending_with(suffix)] -= len(suffix)
    _, inside = _raw_bytes(strings, stops)
    lengths = stops - starts
    words = np.flatnonzero(inside & (lengths >= 1) & (lengths <= FRONT_BYTES))
    k0, k1, sizes, found = one_token_words(raw, starts[words], lengths[words], ignore_merges, initial, merges,
                                           byte_pairs, by_bytes.blob, by_bytes.starts, by_bytes.lengths,
                                           by_bytes.ids, by_bytes.slots)
    if suffix:  # "ab" and "ab</w>" are one word: the same ids, kept once
        order = np.lexsort((sizes, k1, k0))
        again = np.zeros(order.shape[0], dtype=bool)
        again[1:] = ((k0[order][1:] == k0[order][:-1]) & (k1[order][1:] == k1[order][:-1])
                     & (sizes[order][1:] == sizes[order][:-1]))
        kept = np.sort(order[~again])
        k0, k1, sizes, found = k0[kept], k1[kept], sizes[kept], found[kept]
    return seed_words(k0, k1, sizes, found)


_TABLES: dict[str, ByteLevelTables] = {}


def _tables(tokenizer_json: str, config: dict | None = None) -> ByteLevelTables:
    """The kernel's tables of a tokenizer, built once per process (`config`: its parsed JSON, where
    the caller has it)."""
    return kept(_TABLES, tokenizer_json,
                lambda: _build_tables(parsed(tokenizer_json) if config is None else config), 4)


def _build_tables(config: dict) -> ByteLevelTables:
    """The tables, each built in linear passes over arrays (`kernels.tokenizer.bytelevel.tables`)."""
    model = config["model"]
    pattern = pre_tokenizer_shape(config)[0]
    chain = split_chain(config)
    vocab: dict[str, int] = model["vocab"]
    prefix = model.get("continuing_subword_prefix") or ""
    suffix = model.get("end_of_word_suffix") or ""
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    strings = StringArrays.of(list(vocab))
    merges = merge_table_of(*_merge_arrays(model.get("merges") or [], strings, ids, prefix))
    initial = np.full((4, 256), -1, dtype=np.int32)
    for byte, char in BYTE_CHARS.items():
        for variant, token in enumerate((char, prefix + char, prefix + char + suffix, char + suffix)):
            initial[variant, byte] = vocab.get(token, -1)
    raw, inside = _raw_bytes(strings, strings.char_starts[1:])
    keyed = np.flatnonzero(inside & (np.diff(strings.char_starts) > 0))  # the tokens that are bytes
    lengths = np.diff(strings.char_starts)[keyed]
    words = ByteTable.of_arrays(raw, strings.char_starts[keyed], lengths, ids[keyed])
    byte_pairs = byte_pair_table(merges, initial)
    ignore_merges = bool(model.get("ignore_merges"))
    seeds = _one_token_words(strings, raw, suffix, ignore_merges, initial, merges, byte_pairs, words)
    grown_table(empty_table(2), seeds[:0], PackedWordCache.empty(2).records)  # its kernels loaded now, not
    # when a cache first grows (in the middle of a text: tens of ms)
    classes = pattern_classes(pattern)
    ascii_letters = np.array([chr(b).isascii() and chr(b).isalpha() for b in range(128)])
    return ByteLevelTables(classes=classes, swar_letters=bool(((classes[:128] == LETTER) == ascii_letters).all()),
                           ascii_masks=bool((classes[:128] == MASK_CLASSES).all()),
                           fold=probe_fold(pattern), pattern=PROGRAM if chain else PATTERNS[pattern],
                           ignore_merges=ignore_merges, initial=initial,
                           merges=merges, byte_pairs=byte_pairs, vocab_blob=words.blob,
                           vocab_starts=words.starts, vocab_lengths=words.lengths, vocab_ids=words.ids,
                           vocab_slots=words.slots, max_key=int(lengths.max()) if lengths.shape[0] else 1,
                           seeds=seeds, front=seeded_table(seeds),
                           program=NO_PROGRAM if chain is None else chain.arrays)


class ByteLevelFastTokenizer:
    """Encodes text as the given real byte-level BPE tokenizer does (special-token strings as plain
    text, no special tokens added): the kernel for every word its tables vouch for, the real
    model for the others, the real tokenizer for text that is not valid UTF-8."""

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        config = parsed(tokenizer_json)  # shared: read only
        problems = bytelevel_support(config)
        if problems:
            raise UnsupportedTokenizer(problems, FAMILY)
        self.tokenizer = tokenizer
        self.tables = _tables(tokenizer_json, config)
        self.prefix_space = pre_tokenizer_shape(config)[1]
        form = normal_form(config.get("normalizer"))[0]
        self.normal_form = None if form is None else NormalForm(form)  # NFC / NFKC: normal_forms.py
        self.cache = ByteLevelCache(self.tables)
        self.window = WINDOW_BYTES  # bytes of words a kernel call tokenizes (its buffers grow with it)

    def encode(self, text: str) -> np.ndarray:
        """Content ids of `text` (any length: the kernel bounds its own buffers), int32, shape (n,)."""
        if self.normal_form is not None:
            text = self.normal_form.apply(text)
        try:
            data = utf8_view(text)  # strict: a lone surrogate is not UTF-8
        except UnicodeEncodeError:
            return self._real(" " + text if self.prefix_space and not text.startswith(" ") else text)
        if self.prefix_space and data.shape[0] and data[0] != 32:  # bytes, not `" " + text`: a new str has
            data = np.concatenate((_SPACE, data))  # no UTF-8 kept, and encoding it again costs more than a copy
        return self._encode_valid(data)

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Content ids of UTF-8 `data`, int32, shape (n,)."""
        if self.normal_form is not None:
            return self.encode(data.decode("utf-8", "surrogatepass"))
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:  # not UTF-8 (a lone surrogate): the real tokenizer says what it makes of it
            return self._real(data.decode("utf-8", "surrogatepass"))
        if self.prefix_space and data and not data.startswith(b" "):
            data = b" " + data
        return self._encode_valid(np.frombuffer(data, dtype=np.uint8))

    def _real(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def _encode_valid(self, text: np.ndarray) -> np.ndarray:
        """Ids of valid UTF-8 `text` (uint8, shape (n,), the prefix space already in)."""
        ids, fallback = encode_bytes(text, self.tables, self.cache, self.window)
        if fallback.shape[0] == 0:
            return ids
        parts, previous = [], 0
        for start, stop, position in fallback.tolist():
            parts.append(ids[previous:position])
            tokens = self.tokenizer.model.tokenize(byte_level_string(text[start:stop].tobytes()))
            parts.append(np.asarray([t.id for t in tokens], dtype=np.int32))
            previous = position
        parts.append(ids[previous:])
        return np.concatenate(parts)
