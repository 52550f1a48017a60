"""The fast path for SentencePiece-style tokenizers (XLM-R, DeBERTa-v3, ALBERT, T5: Unigram;
Llama / Gemma: BPE with byte fallback), with ids identical to the real tokenizer's.

`sentencepiece_support(config)` lists what the kernel does not reproduce; a tokenizer with nothing on
that list gets `SentencePieceFastTokenizer`. How exactness is reached:

- the model (Unigram Viterbi, byte-fallback BPE) is a transcription of `tokenizers`' Rust code,
  with Unigram scores read back from `Tokenizer.to_str()` (the exact float64s the Rust model holds);
- the normalizer is split into the per-character part (Precompiled, Nmt, NFKC/NFC/NFKD/NFD,
  Lowercase, StripAccents), which is *probed* on every BMP code point alone, and tail operations on
  spaces and the text's ends (the Replace/Strip/Prepend forms the converters write), which the
  kernel performs. A code point is vouched for only where the probe shows it acts alone: not a
  combining, spacing or enclosing mark, format character, Hangul jamo or other grapheme extender,
  not the second half of a canonical composition, its output starting with a starter, and the
  output unchanged between neighbours (`_vouched`). One combining diacritical mark right after a
  base letter is vouched for where the probe shows the pair left as the letter's output and the
  mark (Tagalog's `g̃`, decomposed accents that compose with nothing: `_mark_pairs`). Any other
  character sends its chunk to the real tokenizer;
- the text is cut only at safe cuts (`SafeCuts`), where encoding the parts separately gives the
  ids of the whole, so a chunk sent to the real tokenizer gets exactly the ids it has in the text.
- a Llama / Gemma-style BPE (byte fallback, no pre-tokenizer, Prepend and one-character
  Replaces: `stream.stream_form`) is encoded as one BPE word cut where no merge can cross
  (`pipeline.kernels.tokenizer.sentencepiece.bpe_stream`), the chunk path above only for text that is
  not valid UTF-8.
"""

from __future__ import annotations

import json
import operator
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import tokenizers
from tokenizers import Tokenizer

from pipeline.kernels.common.utf8 import BMP
from pipeline.kernels.tokenizer.sentencepiece.bpe import BpeArrays, BpeTables
from pipeline.kernels.tokenizer.sentencepiece.bpe_stream import StreamTables, stream_encode
from pipeline.kernels.tokenizer.sentencepiece.chunk_cache import chunk_cache, remember_chunk
from pipeline.kernels.tokenizer.sentencepiece.encode import Cuts, Normalizer, encode_kernel, work_buffers
from pipeline.kernels.tokenizer.sentencepiece.normalizer import (
    BASE_COUNT,
    CUT_DROP,
    CUT_KEEP,
    CUT_NONE,
    MARK_COUNT,
    MARK_FIRST,
    META,
    OP_COLLAPSE_SPACES,
    OP_MAP,
    OP_PREPEND,
    OP_REPLACE,
    OP_REPLACE_START,
    OP_STRIP,
    OP_TRIM_SPACES,
    safe_cuts,
)
from pipeline.kernels.tokenizer.sentencepiece.unigram import UnigramArrays, UnigramTables
from pipeline.tokenizer.errors import UnsupportedTokenizer
from pipeline.tokenizer.gc_pause import gc_paused
from pipeline.tokenizer.parsed import parsed
from pipeline.tokenizer.sentencepiece.plain import plain_form, whitespace_cuts
from pipeline.tokenizer.sentencepiece.stream import stream_form
from pipeline.tokenizer.table_cache import cached_arrays

FAMILY = "SentencePiece"
CACHE_SLOTS = 1 << 18  # chunks and words per tokenizer, 16 MB of 64-byte rows (16 MB of books: ~180,000 chunks)
_PER_CHARACTER = {"Precompiled", "Nmt", "NFKC", "NFC", "NFKD", "NFD", "Lowercase", "StripAccents"}
_TAIL_REGEX = {" {2,}": OP_COLLAPSE_SPACES, r"\A +| +\z": OP_TRIM_SPACES}
# Grapheme extenders and prepends that are letters by category (Grapheme_Cluster_Break SpacingMark,
# Extend or Prepend): a Precompiled normalizer maps whole grapheme clusters, so they are not alone.
_NOT_ALONE = {0x0E33, 0x0EB3, 0x0D4E, 0xFF9E, 0xFF9F, 0x0D}
_JAMO = ((0x1100, 0x1200), (0xA960, 0xA980), (0xD7B0, 0xD800))
_MARKS = {"Mn", "Mc", "Me", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


@dataclass(frozen=True)
class _Plan:
    """What the kernel does with a tokenizer, read from its configuration."""

    per_character: list[dict]  # the per-character normalizers, fused into one table (OP_MAP)
    ops: list[tuple[int, str, str]]  # (opcode, pattern, content), OP_MAP among them, in order
    metaspace: dict | None
    whitespace_split: bool
    isolated: tuple[str, ...]  # the characters of an isolated Split of literal pieces, after Metaspace
    problems: list[str]


def _flatten(node: dict | None, kind: str, key: str) -> list[dict]:
    if node is None:
        return []
    if node.get("type") == kind:
        return [leaf for child in node.get(key, []) for leaf in _flatten(child, kind, key)]
    return [node]


def _plan(config: dict) -> _Plan:
    problems: list[str] = []
    per_character, ops = _normalizer_ops(config.get("normalizer"), problems)
    metaspace, whitespace_split, isolated = _pre_tokenizer(config.get("pre_tokenizer"), problems)
    problems += _model_problems(config.get("model") or {})
    plain = [t["content"] for t in config.get("added_tokens", []) if not t.get("special")]
    if plain:
        problems.append(f"{len(plain)} non-special added tokens (e.g. {plain[0]!r})")
    for option in ("truncation", "padding"):
        if config.get(option):
            problems.append(f"{option} is set")
    return _Plan(per_character, ops, metaspace, whitespace_split, isolated, problems)


def _normalizer_ops(normalizer: dict | None, problems: list[str]) -> tuple[list[dict], list[tuple[int, str, str]]]:
    """(the per-character normalizers, the operations in order with OP_MAP standing for them); what
    the kernel cannot do is appended to `problems`."""
    per_character: list[dict] = []
    ops: list[tuple[int, str, str]] = []
    mapped = False
    for node in _flatten(normalizer, "Sequence", "normalizers"):
        kind = node.get("type")
        if kind in _PER_CHARACTER:
            if mapped and ops[-1][0] != OP_MAP:
                problems.append(f"normalizer {kind} after a multi-character operation")
            if not ops or ops[-1][0] != OP_MAP:
                ops.append((OP_MAP, "", ""))
            mapped = True
            per_character.append(node)
        elif kind == "Replace":
            pattern, content = node.get("pattern", {}), node.get("content", "")
            if "String" in pattern and pattern["String"]:
                ops.append((OP_REPLACE, pattern["String"], content))
            elif pattern.get("Regex") in _TAIL_REGEX and (pattern["Regex"] != r"\A +| +\z" or content == ""):
                ops.append((_TAIL_REGEX[pattern["Regex"]], "", content))
            elif (pattern.get("Regex") or "").startswith(r"\A") and _is_literal(pattern["Regex"][2:]):
                ops.append((OP_REPLACE_START, pattern["Regex"][2:], content))
            else:
                problems.append(f"normalizer Replace with pattern {pattern}")
        elif kind == "Strip":
            ops.append((OP_STRIP, " " if node.get("strip_left", True) else "", " " if node.get("strip_right", True)
                        else ""))
        elif kind == "Prepend":
            ops.append((OP_PREPEND, "", node.get("prepend", "")))
        else:
            problems.append(f"normalizer {kind}")
    if not mapped:
        ops.insert(0, (OP_MAP, "", ""))  # no per-character normalizer: the table only checks the UTF-8
    return per_character, ops


def _pre_tokenizer(pre_tokenizer: dict | None, problems: list[str]) -> tuple[dict | None, bool, tuple[str, ...]]:
    """(the Metaspace pre-tokenizer or None, whether WhitespaceSplit comes before it, the characters
    an isolated Split after them makes words of their own); what the kernel cannot do is appended to
    `problems`."""
    metaspace, whitespace_split, isolated = None, False, ()
    pres = _flatten(pre_tokenizer, "Sequence", "pretokenizers")
    if pres and pres[-1].get("type") == "Split":
        isolated = _isolated_characters(pres[-1], problems)
        pres = pres[:-1]
    kinds = [p.get("type") for p in pres]
    if kinds == ["WhitespaceSplit", "Metaspace"]:
        whitespace_split, metaspace = True, pres[1]
    elif kinds == ["Metaspace"]:
        metaspace = pres[0]
    elif kinds:
        problems.append(f"pre-tokenizer {'+'.join(kinds)} (only Metaspace, WhitespaceSplit+Metaspace or none, "
                        "each optionally followed by an isolated Split of literal characters)")
    if metaspace is not None:
        if metaspace.get("replacement") != META:
            problems.append(f"Metaspace replacement {metaspace.get('replacement')!r} (only {META!r})")
        if whitespace_split and _scheme(metaspace) == "first":
            problems.append("WhitespaceSplit before Metaspace with prepend_scheme first")
    if META in isolated or " " in isolated:
        problems.append("Split isolating a space or `▁` (the Metaspace words' own marker)")
    return metaspace, whitespace_split, isolated


def _isolated_characters(split: dict, problems: list[str]) -> tuple[str, ...]:
    """The characters of a Split whose regex is an alternation of single literal characters
    (`,|\\(|\\)`: transformers' SpmConverter writes the user-defined pieces of a SentencePiece model
    so, which SentencePiece emits whole), behavior Isolated, not inverted; every such character is
    then a word of its own. Anything else is appended to `problems` with the reason."""
    pattern = split.get("pattern") or {}
    literal = pattern.get("String")
    alternatives = [literal] if literal is not None else _alternatives(pattern.get("Regex"))
    if split.get("behavior") != "Isolated" or split.get("invert"):
        problems.append(f"Split behavior {split.get('behavior')}{' inverted' if split.get('invert') else ''} "
                        "(only Isolated, not inverted)")
        return ()
    if alternatives is None or not alternatives or any(len(a) != 1 for a in alternatives):
        problems.append(f"Split pattern {json.dumps(pattern, ensure_ascii=False)} (only an alternation of single "
                        "literal characters, as transformers writes a SentencePiece model's user-defined pieces)")
        return ()
    return tuple(dict.fromkeys(alternatives))


def _alternatives(regex: str | None) -> list[str] | None:
    """The literal strings of a regex that is `a|b|...` of literal or backslash-escaped characters
    (re.escape's output), or None where it is anything else."""
    if not regex:
        return None
    out, current, i = [], "", 0
    while i < len(regex):
        char = regex[i]
        if char == "\\":
            if i + 1 >= len(regex) or regex[i + 1].isalnum():  # \d, \p{..}, \A: classes and anchors
                return None
            current += regex[i + 1]
            i += 2
            continue
        if char == "|":
            out.append(current)
            current = ""
        elif char in ".^$?*+()[]{}":
            return None
        else:
            current += char
        i += 1
    out.append(current)
    return out


def _model_problems(model: dict) -> list[str]:
    kind = model.get("type")
    if kind == "Unigram":
        return []
    if kind != "BPE":
        return [f"model {kind} (only Unigram or BPE)"]
    problems = []
    if model.get("dropout") not in (None, 0, 0.0):
        problems.append(f"BPE dropout {model['dropout']}")
    for option in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(option):
            problems.append(f"BPE {option} {model[option]!r}")
    return problems


def _is_literal(pattern: str) -> bool:
    return bool(pattern) and not any(c in pattern for c in "\\.^$|?*+()[]{}")


def _scheme(metaspace: dict) -> str:
    if metaspace.get("add_prefix_space") is False:
        return "never"
    return metaspace.get("prepend_scheme", "always")


def sentencepiece_support(config: dict) -> list[str]:
    """What the SentencePiece fast path cannot reproduce of a tokenizer (empty: covered exactly).

    Covered: a Unigram or BPE model (byte_fallback, fuse_unk, ignore_merges; no dropout, no subword
    prefix or suffix); a Metaspace pre-tokenizer (replacement `▁`, any prepend_scheme, split or
    not), alone or after WhitespaceSplit, or none (the `Prepend("▁")` + `Replace(" ", "▁")` form),
    each optionally followed by an isolated Split of single literal characters (a SentencePiece
    model's user-defined pieces, as transformers' converter writes them: AI21 J2's `,|\\(|\\)`);
    normalizers Precompiled, Nmt, NFKC, NFC, NFKD, NFD, Lowercase, StripAccents (consecutive),
    Replace with a literal pattern or the converters' regexes (` {2,}`, `\\A +| +\\z`, `\\A▁`), Strip,
    Prepend; special added tokens only (encoded as text)."""
    return _plan(config).problems


_CODE_POINT_FORMAT = 1
_CODE_POINT_ARRAYS = ("flags", "starts", "lengths", "blob")
_FORM_ARRAYS = ("plain_map", "plain_prefix", "plain_cp", "run_bytes", "edges")


def _code_points(per_character: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(flags uint8, starts int32, lengths int32, blob uint8) over the BMP: which code points the kernel
    may normalise alone, and the UTF-8 of their output. Kept on disk (a second or more to probe):
    keyed by the normalizers, the `tokenizers` version that normalises and Python's Unicode version."""
    if not per_character:
        return _probe_code_points(per_character)
    key = (f"{_CODE_POINT_FORMAT}|{tokenizers.__version__}|{unicodedata.unidata_version}|"
           f"{json.dumps(per_character, sort_keys=True)}")
    arrays = cached_arrays("sentencepiece", key, _CODE_POINT_ARRAYS,
                           lambda: dict(zip(_CODE_POINT_ARRAYS, _probe_code_points(per_character))))
    return tuple(arrays[name] for name in _CODE_POINT_ARRAYS)


def _probe_code_points(per_character: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    normalize = _normalizer(json.dumps(per_character)) if per_character else (lambda s: s)
    seconds = _composition_seconds()
    flags = np.zeros(BMP, dtype=np.uint8)
    starts = np.zeros(BMP, dtype=np.int32)
    lengths = np.zeros(BMP, dtype=np.int32)
    parts: list[bytes] = []
    total = 0
    for cp in range(BMP):
        if 0xD800 <= cp < 0xE000:
            continue
        char = chr(cp)
        out = normalize(char) if per_character else char
        if not _vouched(cp, char, out, seconds, normalize, per_character):
            continue
        data = out.encode("utf-8")
        flags[cp], starts[cp], lengths[cp] = 1, total, len(data)
        parts.append(data)
        total += len(data)
    blob = np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8).copy()
    return flags, starts, lengths, blob


_MARK_FORMAT = 1
_MARK_ARRAYS = ("marks",)


def _mark_pairs(per_character: list[dict], flags: np.ndarray, map_out) -> np.ndarray:
    """uint8 (MARK_COUNT * BASE_COUNT,), or empty without a per-character normalizer (every character
    is then vouched for): 1 at (mark - MARK_FIRST) * BASE_COUNT + base where a combining mark
    U+0300..U+036F right after the vouched letter `base` (below U+0250) is left as it is: the pair
    normalises to the letter's output followed by the mark, alone, twice over and between other
    letters. Unicode composes no such pair (NFC keeps both). Kept on disk (~0.5 s to probe)."""
    if not per_character:
        return np.zeros(0, dtype=np.uint8)
    key = (f"{_MARK_FORMAT}|{tokenizers.__version__}|{unicodedata.unidata_version}|"
           f"{json.dumps(per_character, sort_keys=True)}")

    def probe() -> dict[str, np.ndarray]:
        normalize = _normalizer(json.dumps(per_character))
        table = np.zeros(MARK_COUNT * BASE_COUNT, dtype=np.uint8)
        a = normalize("a")
        for base in range(BASE_COUNT):
            char = chr(base)
            if not flags[base] or not unicodedata.category(char).startswith("L"):
                continue
            out = map_out(char)
            for mark in range(MARK_FIRST, MARK_FIRST + MARK_COUNT):
                pair = char + chr(mark)
                if unicodedata.normalize("NFC", pair) != pair:
                    continue
                if normalize(pair) == out + chr(mark) and normalize(pair + pair) == 2 * (out + chr(mark)) \
                        and normalize("a" + pair + "a") == a + out + chr(mark) + a:
                    table[(mark - MARK_FIRST) * BASE_COUNT + base] = 1
        return {"marks": table}

    return cached_arrays("sentencepiece-marks", key, _MARK_ARRAYS, probe)["marks"]


def _vouched(cp: int, char: str, out: str, seconds: frozenset[int], normalize, per_character: list[dict]) -> bool:
    if not per_character:
        return True  # no normalizer: any character is itself
    if unicodedata.category(char) in _MARKS or cp in _NOT_ALONE or cp in seconds:
        return False
    if unicodedata.combining(char) or any(lo <= cp < hi for lo, hi in _JAMO):
        return False
    if out and (unicodedata.combining(out[0]) or ord(out[0]) in seconds
                or unicodedata.category(out[0]) in ("Mn", "Mc", "Me")):
        return False
    return normalize(char + char) == out + out and normalize("a" + char + "a") == normalize("a") + out + normalize("a")


@lru_cache(maxsize=1)
def _composition_seconds() -> frozenset[int]:
    """Code points that canonical composition can join to the character before them."""
    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo
    for cp in range(0x30000):  # no code point above U+2FA1D has a canonical decomposition
        decomposition = unicodedata.decomposition(chr(cp)) if not 0xD800 <= cp < 0xE000 else ""
        if decomposition and not decomposition.startswith("<"):
            parts = decomposition.split()
            if len(parts) == 2 and unicodedata.normalize("NFC", chr(int(parts[0], 16)) + chr(int(parts[1], 16))) \
                    == chr(cp):
                seconds.add(int(parts[1], 16))
    return frozenset(seconds)


def _normalizer(per_character_json: str):
    """normalize_str of a Sequence of the given normalizers (a throwaway tokenizer carries it)."""
    config = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
              "normalizer": {"type": "Sequence", "normalizers": json.loads(per_character_json)},
              "pre_tokenizer": None, "post_processor": None, "decoder": None,
              "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}
    return Tokenizer.from_str(json.dumps(config)).normalizer.normalize_str


def _real_tokenizer(tokenizer: Tokenizer, tokenizer_json: str, config: dict) -> Tokenizer:
    """The real tokenizer the fallback chunks go to: `tokenizer` itself where it already encodes
    special-token strings as text and its model has `config`'s pieces at their ids (the job's, from
    `spec.build_tokenizer`: building a second one from a 262k vocabulary costs a worker ~1-3 s; the
    check ~50 ms), else a copy of our own built from `tokenizer_json` (the caller's object is never
    changed): one built from another JSON (the raw file where `tokenizer_json` is its content form,
    `content.content_tokenizer_json`) or one that matches special-token strings."""
    if tokenizer.encode_special_tokens:
        vocab = (config.get("model") or {}).get("vocab") or {}
        if isinstance(vocab, list):
            ids, tokens = range(len(vocab)), map(operator.itemgetter(0), vocab)
        else:
            ids, tokens = vocab.values(), vocab.keys()
        if tokenizer.get_vocab_size(with_added_tokens=False) == len(vocab) and \
                all(map(operator.eq, map(tokenizer.model.id_to_token, ids), tokens)):
            return tokenizer
    own = Tokenizer.from_str(tokenizer_json)
    own.encode_special_tokens = True
    return own


class SentencePieceFastTokenizer:
    """Encodes text as the given real SentencePiece-style tokenizer does (special-token strings as
    plain text, no special tokens added): the kernel where it can vouch for a chunk, the real
    tokenizer for the rest.

    `tokenizer`: the real tokenizer built from `tokenizer_json`; used as it is for the fallback chunks
    where its `encode_special_tokens` is on (a copy is built otherwise: `_real_tokenizer`)."""

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str) -> None:
        config = parsed(tokenizer_json)  # shared: read only
        problems = sentencepiece_support(config)
        if problems:
            raise UnsupportedTokenizer(problems, FAMILY)
        self.tokenizer = _real_tokenizer(tokenizer, tokenizer_json, config)
        self.tables = _tables(tokenizer_json, self.tokenizer, config)
        self._tables_args = (self.tables.cuts, self.tables.normalizer, self.tables.uni, self.tables.bpe)
        self.cache = chunk_cache(CACHE_SLOTS)
        self._work = work_buffers()  # the kernel's scratch; a chunk too long for it gets larger ones for its call
        self._out = np.empty(0, dtype=np.int32)  # `_buffers`
        self._spans = np.empty((0, 3), dtype=np.int64)

    def encode(self, text: str) -> np.ndarray:
        """Content ids of `text`, int32, shape (n,)."""
        return self.encode_bytes(text.encode("utf-8", "surrogatepass"))

    def encode_bytes(self, data: bytes) -> np.ndarray:
        """Content ids of UTF-8 `data`, int32, shape (n,)."""
        if self.tables.stream is not None:
            ids = self._encode_stream(data)
            if ids is not None:
                return ids
        return self._encode_chunks(data)

    def _encode_stream(self, data: bytes) -> np.ndarray | None:
        """The ids by segments of one BPE word (`kernels.tokenizer.sentencepiece.bpe_stream`); None where
        `data` is not valid UTF-8 (lone surrogates): the chunk path hands such text to the real tokenizer."""
        stream, growth = self.tables.stream, int(self.tables.stream.growth[0])
        text = np.frombuffer(data, dtype=np.uint8)
        out = np.empty(len(data) + len(data) // 2 + 64, dtype=np.int32)
        n_out, position = 0, 0
        while True:
            n_out, position, bad = stream_encode(text, position, stream, self.tables.bpe, self.cache, out, n_out)
            if bad:
                return None
            if position >= len(data):
                return out[:n_out].copy()
            more = growth * (len(data) - position) + len(stream.prefix) + 64
            out = np.concatenate([out[:n_out], np.empty(more, dtype=np.int32)])

    def _encode_chunks(self, data: bytes) -> np.ndarray:
        """The ids chunk by chunk (`pipeline.kernels.tokenizer.sentencepiece.encode`), with fallback spans."""
        cuts, normalizer, uni, bpe = self._tables_args
        text = np.frombuffer(data, dtype=np.uint8)
        out, spans = self._buffers(len(data))
        n_out, n_spans, position, work = 0, 0, 0, self._work
        while True:
            n_out, n_spans, position, need = encode_kernel(text, position, cuts, normalizer, uni, bpe, self.cache, out,
                                                           n_out, spans, n_spans, work)
            if position >= len(data):
                break
            if need > 0:  # a chunk longer than the buffers: larger ones for the rest of this call
                work = work_buffers(int(need))
                continue
            out = np.concatenate([out, np.empty(out.shape[0] + 4 * (len(data) - position) + 64, dtype=np.int32)])
            self._out = out
        ids = out[:n_out]
        if n_spans == 0:
            return ids.copy()  # never a view of the kept buffer
        pieces = [data[a:b].decode("utf-8", "surrogatepass") for a, b, _ in spans[:n_spans].tolist()]
        encodings = self.tokenizer.encode_batch_fast(pieces, add_special_tokens=False)
        parts, previous = [], 0
        for (start, stop, at), encoding in zip(spans[:n_spans].tolist(), encodings):
            parts.append(ids[previous:at])
            real_ids = np.asarray(encoding.ids, dtype=np.int32)
            parts.append(real_ids)
            remember_chunk(self.cache, text, start, stop, real_ids)  # the same chunk again: a cache hit
            previous = at
        parts.append(ids[previous:])
        return np.concatenate(parts)

    def _buffers(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The kernel's output and fallback-span arrays for `size` bytes of text: kept between calls and
        grown to the largest text yet (slices of at most the family's `slice_chars`), so that a call
        does not map and fault in fresh pages for ids it then copies out."""
        if self._out.shape[0] < size + size // 2 + 64:
            self._out = np.empty(size + size // 2 + 64, dtype=np.int32)
        if self._spans.shape[0] < size // 2 + 2:
            self._spans = np.empty((size // 2 + 2, 3), dtype=np.int64)
        return self._out, self._spans

    def safe_cuts(self, data: bytes) -> np.ndarray:
        """Byte positions of the spaces at which UTF-8 `data` may be cut (int64, ascending); see
        `sentencepiece_cut_chars` for what a cut means under each mode."""
        text = np.frombuffer(data, dtype=np.uint8)
        out = np.empty(max(len(data), 1), dtype=np.int64)
        return out[:safe_cuts(text, self.tables.cut_mode, self.tables.cut_left, self.tables.cut_right, out)].copy()


@dataclass(frozen=True)
class _Tables:
    cut_mode: int
    cut_left: np.ndarray
    cut_right: np.ndarray
    flags: np.ndarray
    cp_start: np.ndarray
    cp_len: np.ndarray
    cp_blob: np.ndarray
    marks: np.ndarray
    ops: np.ndarray
    op_blob: np.ndarray
    pretok: np.ndarray
    growth: np.ndarray
    plain_map: np.ndarray
    plain_prefix: np.ndarray
    plain_cp: np.ndarray
    run_bytes: np.ndarray
    edges: np.ndarray
    isolate: np.ndarray
    uni: UnigramArrays
    bpe: BpeArrays
    stream: StreamTables | None  # the stream form's tables (`sentencepiece_stream`), None where it does not apply

    @property
    def cuts(self) -> Cuts:
        return Cuts(np.array([self.cut_mode, int(self.run_bytes[0x20])], dtype=np.int64), self.cut_left,
                    self.cut_right, self.run_bytes, self.edges, self.isolate)

    @property
    def normalizer(self) -> Normalizer:
        return Normalizer(self.flags, self.cp_start, self.cp_len, self.cp_blob, self.marks, self.ops, self.op_blob,
                          self.pretok,
                          self.growth, self.plain_map, self.plain_prefix, self.plain_cp)


def _ops(plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    blob = bytearray()
    rows = []
    for code, pattern, content in plan.ops:
        p, c = pattern.encode(), content.encode()
        if code == OP_STRIP:
            rows.append((code, 0, len(p), 0, len(c)))  # left / right flags as lengths 1 / 0
            continue
        rows.append((code, len(blob), len(p), len(blob) + len(p), len(c)))
        blob += p + c
    return np.array(rows, dtype=np.int64).reshape(-1, 5), np.frombuffer(bytes(blob) or b"\0", dtype=np.uint8).copy()


def _growth(cp_len: np.ndarray) -> np.ndarray:
    """[the longest output of one code point in bytes]: the kernel bounds each chunk's buffers from it
    and the tail operations (`pipeline.kernels.tokenizer.sentencepiece.encode._bounds`)."""
    return np.array([max(1, int(cp_len.max(initial=1)))], dtype=np.int64)


def _cut_rule(plan: _Plan, config: dict, flags: np.ndarray, map_out, pieces: set[str],
              pairs: set[tuple[str, str]] | None) -> tuple[int, np.ndarray, np.ndarray]:
    """The cut mode and the ASCII bytes allowed left and right of a cut space (see sentencepiece_cut_chars)."""
    left = np.zeros(256, dtype=np.uint8)
    right = np.zeros(256, dtype=np.uint8)
    codes = [code for code, _, _ in plan.ops]
    meta = plan.metaspace
    is_bpe = (config.get("model") or {}).get("type") == "BPE"
    split = meta is not None and meta.get("split", True)
    prepends_norm = [content for code, _, content in plan.ops if code == OP_PREPEND]
    replaces_space = (OP_REPLACE, " ", META) in plan.ops
    literal_long = any(code == OP_REPLACE and len(p) > 1 for code, p, _ in plan.ops)
    if not flags[32] or map_out(" ") != " " or literal_long or (not is_bpe and not split and not plan.whitespace_split):
        return CUT_NONE, left, right
    meta_prepends = meta is not None and _scheme(meta) != "never"
    if plan.whitespace_split or (meta_prepends and not prepends_norm) or (
            meta is None and prepends_norm == [META] and replaces_space):
        mode = CUT_DROP  # the right part's own prefix `▁` stands for the dropped space
    elif not meta_prepends and not prepends_norm and OP_STRIP not in codes and OP_TRIM_SPACES not in codes:
        mode = CUT_KEEP
    else:
        return CUT_NONE, left, right
    space_becomes = META if (meta is not None or replaces_space) else " "
    bigram_rule = is_bpe and not split and not plan.whitespace_split
    if bigram_rule and space_becomes not in pieces:
        return CUT_NONE, left, right
    for byte in range(0x21, 0x7F):
        char = chr(byte)
        if not flags[byte] or map_out(char) != char:
            continue
        right[byte] = 1
        if not bigram_rule or (char in pieces and (char, space_becomes) not in pairs):
            left[byte] = 1
    return mode, left, right


def sentencepiece_cut_chars(tokenizer_json: str, config: dict | None = None) -> tuple[str, str, str] | None:
    """Where a SentencePiece-style tokenizer's text may be cut, for the document encoder: None where
    no cut is safe, else (mode, left, right): a cut is at an ASCII space between two ASCII characters
    the tokenizer is known to keep as they are, the one before it in `left`, the one after it in
    `right`. Encoding the parts apart gives the ids of the whole text: with a `▁` prepended to every
    text (Metaspace always/first, or the Prepend normalizer) the mode is "drop" (the space belongs to
    neither part: the prefix the right part gets is the space's own `▁`); without one (prepend_scheme
    never) it is "keep" (the space opens the right part). A Unigram model that sees the whole text
    as one piece (Metaspace split false, or no pre-tokenizer) allows no cut.

    `config`: `tokenizer_json` parsed, where the caller has it. A Unigram model's cuts do not depend
    on its vocabulary, so they are found without building the model's tables: the job asks for the
    cuts of the tokenizer.json and encodes with another JSON (`content.content_tokenizer_json`: its
    special pieces emptied), whose tables alone are built, once."""
    config = parsed(tokenizer_json) if config is None else config
    if (config.get("model") or {}).get("type") == "Unigram":
        plan = _plan(config)
        flags, cp_start, cp_len, cp_blob = _code_points(plan.per_character)
        cut_mode, cut_left, cut_right = _cut_rule(plan, config, flags, _output_of(cp_start, cp_len, cp_blob), set(),
                                                  None)
    else:
        t = _tables(tokenizer_json, config=config)
        cut_mode, cut_left, cut_right = t.cut_mode, t.cut_left, t.cut_right
    if cut_mode == CUT_NONE:
        return None
    left = "".join(chr(b) for b in range(128) if cut_left[b])
    right = "".join(chr(b) for b in range(128) if cut_right[b])
    return ("drop" if cut_mode == CUT_DROP else "keep"), left, right


def _output_of(cp_start: np.ndarray, cp_len: np.ndarray, cp_blob: np.ndarray):
    """The per-character table's output for one BMP character, as a function."""
    def map_out(char: str) -> str:
        cp = ord(char)
        return bytes(cp_blob[cp_start[cp]:cp_start[cp] + cp_len[cp]]).decode("utf-8")
    return map_out


@dataclass(frozen=True)
class _Model:
    """The model's kernel tables, from the model as the Rust tokenizer holds it."""

    uni: UnigramArrays
    bpe: BpeArrays
    is_bpe: int
    pieces: set[str]
    pairs: set[tuple[str, str]] | None  # the adjacent characters inside a BPE piece (None: Unigram)
    stream: StreamTables | None


def _model(plan: _Plan, tokenizer_json: str, tokenizer: Tokenizer | None) -> _Model:
    """`tokenizer`: one built from `tokenizer_json`, where the caller has it (building one from a
    250k vocabulary takes a second)."""
    real = Tokenizer.from_str(tokenizer_json) if tokenizer is None else tokenizer
    exact = json.loads(real.model.__getstate__())  # the model alone, with the float64s the Rust model holds
    if exact["type"] == "Unigram":
        unigram = UnigramTables.build(exact["vocab"], exact.get("unk_id"), exact.get("byte_fallback", False))
        return _Model(unigram.arrays(), _empty_bpe(), 0, set(), None, None)  # no Unigram cut asks for its pieces
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in exact["merges"]]
    tables = BpeTables.build(exact["vocab"], merges, exact.get("unk_token"), exact.get("byte_fallback", False),
                             exact.get("fuse_unk", False), exact.get("ignore_merges", False))
    pieces = set(exact["vocab"])
    pairs = {(a, b) for token in pieces for a, b in zip(token, token[1:])}
    stream = stream_form(plan.ops, bool(plan.per_character),
                         plan.metaspace is not None or plan.whitespace_split or bool(plan.isolated), exact,
                         exact["vocab"], tables)
    return _Model(_empty_unigram(), tables.arrays(), 1, pieces, pairs, stream)


_TABLES: dict[str, _Tables] = {}  # by tokenizer.json, the latest _TABLES_KEPT
_TABLES_KEPT = 4


def _tables(tokenizer_json: str, tokenizer: Tokenizer | None = None, config: dict | None = None) -> _Tables:
    """The kernel's tables of a tokenizer, built once per process (per JSON text). `tokenizer`,
    `config`: that JSON built and parsed, where the caller has them."""
    found = _TABLES.get(tokenizer_json)
    if found is None:
        with gc_paused():  # millions of objects made and dropped (gc_pause.py)
            found = _TABLES[tokenizer_json] = _build_tables(tokenizer_json, tokenizer, config)
        while len(_TABLES) > _TABLES_KEPT:
            del _TABLES[next(iter(_TABLES))]
    return found


def _build_tables(tokenizer_json: str, tokenizer: Tokenizer | None, config: dict | None) -> _Tables:
    config = parsed(tokenizer_json) if config is None else config
    plan = _plan(config)
    flags, cp_start, cp_len, cp_blob = _code_points(plan.per_character)
    model = _model(plan, tokenizer_json, tokenizer)
    map_out = _output_of(cp_start, cp_len, cp_blob)

    def mapped(char: str) -> str | None:
        return map_out(char) if ord(char) < BMP and flags[ord(char)] else None

    cut_mode, cut_left, cut_right = _cut_rule(plan, config, flags, map_out, model.pieces, model.pairs)
    ops, op_blob = _ops(plan)
    meta = plan.metaspace
    isolated = [len(plan.isolated), *map(ord, plan.isolated)] if plan.isolated else []
    pretok = np.array([plan.whitespace_split, meta is not None, meta is not None and _scheme(meta) != "never",
                       meta is not None and bool(meta.get("split", True)), model.is_bpe, *isolated], dtype=np.int64)
    plain_map, plain_prefix, plain_cp, run_bytes, edges = _forms(plan, mapped, cut_mode == CUT_DROP)
    marks = _mark_pairs(plan.per_character, flags, map_out)
    return _Tables(cut_mode, cut_left, cut_right, flags, cp_start, cp_len, cp_blob, marks, ops, op_blob, pretok,
                   _growth(cp_len), plain_map, plain_prefix, plain_cp, run_bytes, edges,
                   _isolating_chunks(plan, cut_mode, flags, map_out), model.uni, model.bpe, model.stream)


def _isolating_chunks(plan: _Plan, cut_mode: int, flags: np.ndarray, map_out) -> np.ndarray:
    """uint8 (256,): the ASCII characters of an isolated Split that the kernel may make chunks of their
    own where both neighbours are ASCII (no grapheme, composition or canonical reordering crosses
    them); all 0 where a chunk would not be encoded as it is inside the text: a Metaspace or Prepend
    (every chunk would get a `▁`), an operation at the text's ends (Strip, trim, a Replace at the
    start), a Replace of more than one character or of one holding an isolated character."""
    table = np.zeros(256, dtype=np.uint8)
    if not plan.isolated or cut_mode != CUT_NONE or plan.metaspace is not None or plan.whitespace_split:
        return table
    for code, pattern, content in plan.ops:
        if code not in (OP_MAP, OP_REPLACE, OP_COLLAPSE_SPACES) or (code == OP_REPLACE and len(pattern) != 1) \
                or any(c in pattern + content for c in plan.isolated):
            return table
    for char in plan.isolated:
        if ord(char) < 0x80 and flags[ord(char)] and map_out(char) == char:
            table[ord(char)] = 1
    return table


def _forms(plan: _Plan, mapped, cut_drop: bool) -> tuple[np.ndarray, ...]:
    """The plain-chunk form and the whitespace cuts (`plain.py`): a second or more of per-code-point
    loops, kept on disk."""
    meta = plan.metaspace
    prepends = None if meta is None else _scheme(meta) != "never"
    split = meta is not None and bool(meta.get("split", True))

    def forms() -> dict[str, np.ndarray]:
        return dict(zip(_FORM_ARRAYS, (*plain_form(plan.ops, prepends, split, plan.whitespace_split, mapped, BMP,
                                                   plan.isolated),
                                       *whitespace_cuts(plan.ops, cut_drop, prepends, split, mapped, BMP))))

    key = (f"{_CODE_POINT_FORMAT}|{tokenizers.__version__}|{unicodedata.unidata_version}|"
           f"{json.dumps(plan.per_character, sort_keys=True)}|{plan.ops!r}|{prepends}|{split}|"
           f"{plan.whitespace_split}|{cut_drop}|{''.join(plan.isolated)}")
    saved = cached_arrays("sentencepiece-forms", key, _FORM_ARRAYS, forms)
    return tuple(saved[name] for name in _FORM_ARRAYS)


def _empty_unigram() -> UnigramArrays:
    return UnigramTables.build([("a", 0.0)], 0, False).arrays()


def _empty_bpe() -> BpeArrays:
    return BpeTables.build({"a": 0}, [], None, False, False, False).arrays()
