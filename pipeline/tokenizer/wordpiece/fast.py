"""The fast path of the WordPiece family: the jitted WordPiece kernel for what it can prove, the
real tokenizer for the rest, with ids identical to the real tokenizer's.

`wordpiece_support` reads the tokenizer JSON and lists what the kernel does not reproduce; only a
tokenizer with nothing on that list gets the fast path. `probe_code_points` then asks the real
tokenizer about every BMP code point; a character is vouched for only where `normal_forms` proves
its output independent of its neighbours (a cased BertNormalizer keeps Tagalog's g + U+0303 inside
the word, on the kernel; NFC composing e + U+0301 leaves the chunk to the real tokenizer). The
fallback is one `encode_batch_fast` call per `encode_bytes` call, for all its spans.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import tokenizers
from tokenizers import Tokenizer

from pipeline.kernels.common.utf8 import BMP
from pipeline.kernels.tokenizer.wordpiece.encode import (
    CHUNK_SPACE,
    INNER_SPACE,
    ISOLATED,
    LETTER,
    MAX_WORD_BYTES,
    OTHER,
    CodePointTable,
    WordCache,
    WordPieceTables,
    encode_bytes,
)
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.parsed import kept, parsed
from pipeline.tokenizer.table_cache import cached_arrays

# Normalizers that leave printable ASCII unchanged (the Unicode normal forms and accent stripping)
# or only lower-case it. BertNormalizer's clean_text and handle_chinese_chars delete control
# characters and isolate CJK, one character at a time.
_PER_CHARACTER = {"BertNormalizer", "Lowercase", "NFD", "NFC", "NFKD", "NFKC", "StripAccents"}

_COMPOSING = {"NFC", "NFKC"}
FAMILY = "WordPiece"
DEFAULT_MAX_CHARS = 100


def _normalizer_support(normalizer: dict | None) -> list[str]:
    """What of a normalizer tree the code point table cannot say (empty: every part acts per character)."""
    if normalizer is None:
        return []
    kind = normalizer.get("type")
    if kind == "Sequence":
        problems = []
        composed = None
        for child in normalizer.get("normalizers", []):
            problems += _normalizer_support(child)
            if child.get("type") in _COMPOSING:
                composed = child["type"]
            elif child.get("type") == "StripAccents" and composed:
                # "e\u0301": composed to "\u00e9" first, which StripAccents keeps, while the mark alone
                # is deleted: the normalizer is not per character, so the code point table cannot say it.
                problems.append(f"normalizer {composed} before StripAccents (composes accents it would strip)")
        return problems
    if kind in _PER_CHARACTER:
        return []
    return [f"normalizer {kind}"]


def max_chars_per_word(model: dict) -> int:
    """`max_input_chars_per_word` as the real tokenizer reads it (0 is 0: every word is [UNK])."""
    value = model.get("max_input_chars_per_word")
    return DEFAULT_MAX_CHARS if value is None else int(value)


def wordpiece_support(config: dict) -> list[str]:
    """What the WordPiece fast path cannot reproduce of a tokenizer (empty when it covers it).
    Covered: WordPiece with a BertPreTokenizer, a BertNormalizer (lowercase on or off, any
    strip_accents, handle_chinese_chars) or a sequence of Unicode normal forms, StripAccents and
    Lowercase, and no added tokens but special ones (which the job encodes as plain text)."""
    problems = _normalizer_support(config.get("normalizer"))
    model = config.get("model") or {}
    if model.get("type") != "WordPiece":
        problems.append(f"model {model.get('type')} (only WordPiece)")
    pre = config.get("pre_tokenizer") or {}
    if pre.get("type") != "BertPreTokenizer":
        problems.append(f"pre-tokenizer {pre.get('type')} (only BertPreTokenizer)")
    plain_added = [t["content"] for t in config.get("added_tokens", []) if not t.get("special")]
    if plain_added:
        problems.append(f"{len(plain_added)} non-special added tokens (e.g. {plain_added[0]!r})")
    if max_chars_per_word(model) >= MAX_WORD_BYTES:
        problems.append(f"max_input_chars_per_word >= {MAX_WORD_BYTES}")
    return problems


_PROBE = "x"  # a neighbour every supported normalizer keeps as it is (lower-case ASCII letter)
_LOW_MARK = "\u0334"  # combining class 1, the lowest: a character before it that is reordered has class > 1

PER_CHARACTER, STRIPPED, COMPOSING = "per character", "decomposed and stripped", "composing"


def _steps(normalizer: dict | None) -> list[str]:
    """The normalizer tree as a flat list of its steps: "decompose" (NFD, NFKD, the NFD of a
    BertNormalizer that strips accents), "compose" (NFC, NFKC), "strip" (removing nonspacing marks)
    and "map" (anything else `wordpiece_support` accepts: per-character maps and deletions)."""
    if normalizer is None:
        return []
    kind = normalizer.get("type")
    if kind == "Sequence":
        return [step for child in normalizer.get("normalizers", []) for step in _steps(child)]
    if kind == "BertNormalizer":
        strip = normalizer.get("strip_accents")
        if strip is None:
            strip = normalizer.get("lowercase", True)
        return ["map", "decompose", "strip", "map"] if strip else ["map"]
    return {"NFD": ["decompose"], "NFKD": ["decompose"], "NFC": ["compose"], "NFKC": ["compose"],
            "StripAccents": ["strip"]}.get(kind, ["map"])


def normal_forms(normalizer: dict | None) -> str:
    """How far a normalizer acts on each character alone, for characters whose output is not ASCII:

    - PER_CHARACTER: no Unicode normal form at all (a cased or accent-keeping BertNormalizer,
      Lowercase, StripAccents alone): every character's output is the same in any context, combining
      marks included;
    - STRIPPED: each decomposition is followed (past per-character maps only) by removing nonspacing
      marks, and nothing composes: a decomposition reorders only marks (combining class > 0), so a
      character whose output holds none is unaffected by its neighbours (the marks reordered around it
      are the ones stripped);
    - COMPOSING: anything else (NFC / NFKC compose a letter with the mark after it; NFD / NFKD without a
      strip reorder the marks it keeps): only ASCII outputs and deleted characters are per character."""
    steps = _steps(normalizer)
    if "compose" in steps:
        return COMPOSING
    for at, step in enumerate(steps):
        if step == "decompose":
            rest = [later for later in steps[at + 1:] if later != "map"]
            if not rest or rest[0] != "strip":
                return COMPOSING
    return STRIPPED if "decompose" in steps else PER_CHARACTER


def _not_reordered(middle: str) -> bool:
    """Whether no character of `middle` has a combining class > 0, asked of Python's Unicode data and of
    the `tokenizers` engine's own NFD (a character of class > 1 is moved behind U+0334, class 1)."""
    decompose = tokenizers.normalizers.NFD().normalize_str
    for char in middle:
        if unicodedata.combining(char) or decompose(_PROBE + char + _LOW_MARK) != decompose(_PROBE + char) + _LOW_MARK:
            return False
    return True


def probe_code_points(tokenizer: Tokenizer, forms: str | None = None) -> CodePointTable:
    """Ask the tokenizer how it treats each BMP code point between two letters: split there,
    join the word as a fixed UTF-8 string, stand alone as its own piece (then with which ids), or
    something else (OTHER: the real tokenizer encodes the chunk).

    A character that joins the word is LETTER when its output is the same in any context (`forms`,
    from `normal_forms`): an ASCII letter or digit or nothing always; any other output (a letter that
    stays non-ASCII, a combining mark the normalizer keeps) where the normalizer has no composition
    (PER_CHARACTER), or only decompositions whose marks it strips and the output holds no mark
    (STRIPPED). BertPreTokenizer splits only at whitespace and punctuation, which the probe sees as
    more than one piece; a mark or letter it does not split at stays inside the word, as in the real
    tokenizer, and the word is looked up by its UTF-8 bytes. `forms` defaults to what `normal_forms`
    says of the tokenizer's own normalizer."""
    if forms is None:
        forms = normal_forms(parsed(tokenizer.to_str()).get("normalizer"))
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer else (lambda s: s)
    pre_tokenize = tokenizer.pre_tokenizer.pre_tokenize_str
    kinds = np.full(BMP, OTHER, dtype=np.uint8)
    starts = np.zeros(BMP, dtype=np.int32)
    lengths = np.zeros(BMP, dtype=np.int32)
    letters: list[bytes] = []
    letter_bytes = 0
    isolated: list[int] = []
    alone: list[int] = []

    def pieces(text: str) -> list[str]:
        return [piece for piece, _ in pre_tokenize(normalize(text))]

    def joins(char: str, middle: str) -> bool:
        if middle == "":
            return True
        if middle.isascii():
            return middle.isalnum() and unicodedata.combining(char) == 0
        if forms == PER_CHARACTER:
            return True
        return forms == STRIPPED and _not_reordered(middle)

    for cp in range(BMP):
        if 0xD800 <= cp < 0xE000:
            continue
        char = chr(cp)
        if char in " \t\r\n":
            kinds[cp] = CHUNK_SPACE
            continue
        around = pieces(_PROBE + char + _PROBE)
        if around == [_PROBE, _PROBE]:
            kinds[cp] = INNER_SPACE
        elif len(around) == 1 and len(around[0]) >= 2:
            middle = around[0][1:-1]
            if around[0] == _PROBE + middle + _PROBE and joins(char, middle):
                encoded = middle.encode("utf-8", "surrogatepass")
                kinds[cp], starts[cp], lengths[cp] = LETTER, letter_bytes, len(encoded)
                letters.append(encoded)
                letter_bytes += len(encoded)
        elif (len(around) == 3 and around[0] == around[2] == _PROBE and unicodedata.combining(char) == 0
              and pieces(_PROBE + char + char + _PROBE) == [_PROBE, around[1], around[1], _PROBE]):
            alone.append(cp)
    encodings = tokenizer.encode_batch_fast([chr(cp) for cp in alone], add_special_tokens=False)
    for cp, encoding in zip(alone, encodings):
        if encoding.ids:
            kinds[cp], starts[cp], lengths[cp] = ISOLATED, len(isolated), len(encoding.ids)
            isolated.extend(encoding.ids)
    return CodePointTable(kinds=kinds, starts=starts, lengths=lengths,
                          letters=np.frombuffer(b"".join(letters) or b"\0", dtype=np.uint8).copy(),
                          isolated_ids=np.asarray(isolated or [0], dtype=np.int32))


_TABLE_FORMAT = 2  # 2: non-ASCII letters and kept marks vouched for (issue 33)


def _code_points(tokenizer_json: str) -> CodePointTable:
    """The probed table, from the on-disk cache when an earlier process made it (probing takes
    about a second, once per worker process otherwise): keyed by the tokenizer JSON and the
    `tokenizers` version that answered the probes. Only a probe builds the real tokenizer."""
    names = tuple(CodePointTable.__dataclass_fields__)

    def probe() -> dict[str, np.ndarray]:
        tokenizer = Tokenizer.from_str(tokenizer_json)
        tokenizer.encode_special_tokens = True
        table = probe_code_points(tokenizer, normal_forms(parsed(tokenizer_json).get("normalizer")))
        return {name: getattr(table, name) for name in names}

    key = f"{_TABLE_FORMAT}|{tokenizers.__version__}|{tokenizer_json}"
    return CodePointTable(**cached_arrays("wordpiece", key, names, probe))


def _unk_id(config: dict) -> int:
    """The id `Tokenizer.token_to_id` gives the model's unknown token (an added token's first, then
    the vocabulary's), -1 for none: read from the parsed JSON, without building the tokenizer."""
    model = config["model"]
    name = model.get("unk_token") or "[UNK]"
    added = {t.get("content"): t.get("id") for t in config.get("added_tokens") or [] if isinstance(t, dict)}
    found = added.get(name, model["vocab"].get(name))
    return -1 if found is None else int(found)


_TABLES: dict[str, WordPieceTables] = {}


def _tables(tokenizer_json: str, config: dict | None = None) -> WordPieceTables:
    """The kernel's tables of a tokenizer, built once per process (`config`: its parsed JSON, where
    the caller has it)."""
    return kept(_TABLES, tokenizer_json, lambda: _build(parsed(tokenizer_json) if config is None else config,
                                                         tokenizer_json), 4)


def _build(config: dict, tokenizer_json: str) -> WordPieceTables:
    model = config["model"]
    prefix = model.get("continuing_subword_prefix")
    return WordPieceTables.build(model["vocab"], "##" if prefix is None else prefix, _unk_id(config),
                                 max_chars_per_word(model), _code_points(tokenizer_json))


class WordPieceFastTokenizer:
    """Encodes text as the given real tokenizer does (with special-token strings as plain text,
    no special tokens added): the kernel where its tables vouch for the text, `tokenizer` for the
    rest."""

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        config = parsed(tokenizer_json)  # shared: read only
        problems = wordpiece_support(config)
        if problems:
            raise UnsupportedTokenizer(problems, FAMILY)
        self.tokenizer = tokenizer
        self.tables = _tables(tokenizer_json, config)
        self.cache = WordCache.empty()

    def encode(self, text: str) -> np.ndarray:
        """Content ids of `text`, int32, shape (n,)."""
        return self.encode_bytes(text.encode("utf-8", "surrogatepass"))

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Content ids of UTF-8 `data`, int32, shape (n,)."""
        ids, spans = encode_bytes(np.frombuffer(data, dtype=np.uint8), self.tables, self.cache)
        if spans.shape[0] == 0:
            return ids
        pieces = [data[start:stop].decode("utf-8", "surrogatepass") for start, stop, _ in spans.tolist()]
        encodings = self.tokenizer.encode_batch_fast(pieces, add_special_tokens=False)
        parts, previous = [], 0
        for (_, _, position), encoding in zip(spans.tolist(), encodings):
            parts.append(ids[previous:position])
            parts.append(np.asarray(encoding.ids, dtype=np.int32))
            previous = position
        parts.append(ids[previous:])
        return np.concatenate(parts)
