"""The SentencePiece normalizer and pre-tokenizer kernel (`normalizer.pre_tokenize`) and its safe
cuts (`normalizer.safe_cuts`) called directly on small tables, against plain-Python oracles of each
operation (`str.replace`, `re.sub`, Rust's whitespace strip, Metaspace)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.common.utf8 import BMP
from pipeline.kernels.tokenizer.sentencepiece import normalizer as nz
from pipeline.kernels.tokenizer.sentencepiece.normalizer import META, is_white, pre_tokenize, safe_cuts

RUST_WHITE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B))))
# The per-character table: upper case folded, ß -> "ss", the soft hyphen deleted, U+0301 unsupported
# (a combining mark: flag 0), everything else in the alphabet itself.
MAPPED = {"A": "a", "B": "b", "ß": "ss", "\u00ad": ""}
UNSUPPORTED = "\u0301"
ALPHABET = "abAB ß\u00ad\u00a0\u3000\tx" + META + UNSUPPORTED
TABLE = (set(ALPHABET) | {"s"}) - {UNSUPPORTED}  # the characters the table vouches for


def code_points():
    flags = np.zeros(BMP, dtype=np.uint8)
    starts = np.zeros(BMP, dtype=np.int32)
    lengths = np.zeros(BMP, dtype=np.int32)
    blob = b""
    for char in sorted(TABLE):
        out = MAPPED.get(char, char).encode()
        flags[ord(char)], starts[ord(char)], lengths[ord(char)] = 1, len(blob), len(out)
        blob += out
    return flags, starts, lengths, np.frombuffer(blob, dtype=np.uint8).copy()


CODE_POINTS = code_points()


def ops_arrays(ops: list[tuple[int, str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's rows (opcode, pattern start, length, content start, length) and their blob."""
    rows, blob = [], b""
    for code, pattern, content in ops:
        p, c = pattern.encode(), content.encode()
        if code == nz.OP_STRIP:  # left / right as lengths 1 / 0
            rows.append((code, 0, len(p), 0, len(c)))
            continue
        rows.append((code, len(blob), len(p), len(blob) + len(p), len(c)))
        blob += p + c
    return np.array(rows, dtype=np.int64).reshape(-1, 5), np.frombuffer(blob or b"\0", dtype=np.uint8).copy()


def apply(code: int, pattern: str, content: str, text: str) -> str | None:
    if code == nz.OP_MAP:
        if any(char not in TABLE for char in text):
            return None
        return "".join(MAPPED.get(char, char) for char in text)
    if code == nz.OP_REPLACE:
        return text.replace(pattern, content)
    if code == nz.OP_COLLAPSE_SPACES:
        return re.sub(" {2,}", content, text)
    if code == nz.OP_TRIM_SPACES:
        return text.strip(" ")
    if code == nz.OP_STRIP:
        white = "".join(RUST_WHITE)
        text = text.lstrip(white) if pattern else text
        return text.rstrip(white) if content else text
    if code == nz.OP_PREPEND:
        return content + text if text else text
    assert code == nz.OP_REPLACE_START
    return content + text[len(pattern):] if text.startswith(pattern) else text


def metaspace(text: str, prepend: bool, split: bool) -> list[str]:
    text = text.replace(" ", META)
    if prepend and text and not text.startswith(META):
        text = META + text
    if not split:
        return [text] if text else []
    return [word for word in re.split(f"(?={META})", text) if word]


def oracle(text: str, ops, pretok: tuple[bool, bool, bool, bool]) -> list[str] | None:
    for op in ops:
        text = apply(*op, text)
        if text is None:
            return None
    ws_split, meta, prepend, split = pretok
    if not meta:
        return [text] if text else []
    if not ws_split:
        return metaspace(text, prepend, split)
    return [word for piece in re.split(f"[{''.join(RUST_WHITE)}]+", text) if piece
            for word in metaspace(piece, prepend, split)]


def kernel_words(text: str, ops, pretok) -> list[str] | None:
    data = np.frombuffer(b"<" + text.encode() + b">", dtype=np.uint8)  # the chunk inside a longer text
    rows, blob = ops_arrays(ops)
    size = 64 * len(data) + 64  # four operations may double the text each, Metaspace triple it
    words = np.zeros(size, dtype=np.uint8)
    bounds = np.zeros((size, 2), dtype=np.int64)
    n = pre_tokenize(data, 1, len(data) - 1, *CODE_POINTS, np.zeros(0, np.uint8), rows, blob,
                     np.array([*pretok, 0], dtype=np.int64),
                     np.zeros(size, np.uint8), np.zeros(size, np.uint8), words, bounds)
    if n < 0:
        return None
    return [bytes(words[a:b]).decode("utf-8") for a, b in bounds[:n].tolist()]


OPS = st.lists(st.one_of(
    st.just((nz.OP_MAP, "", "")),
    st.tuples(st.just(nz.OP_REPLACE), st.sampled_from([" ", "ab", "ss", "a"]), st.sampled_from(["", META, "x", "  "])),
    st.tuples(st.just(nz.OP_COLLAPSE_SPACES), st.just(" {2,}"), st.sampled_from([" ", META])),
    st.just((nz.OP_TRIM_SPACES, "", "")),
    st.tuples(st.just(nz.OP_STRIP), st.sampled_from(["", " "]), st.sampled_from(["", " "])),
    st.tuples(st.just(nz.OP_PREPEND), st.just(""), st.sampled_from([META, "x"])),
    st.tuples(st.just(nz.OP_REPLACE_START), st.sampled_from([" ", "a"]), st.sampled_from([META, ""])),
), max_size=4)


def test_whitespace_is_rusts():
    for cp in range(0x3100):
        assert bool(is_white(cp)) == (chr(cp) in RUST_WHITE), hex(cp)


def test_examples():
    mapped_then_meta = [(nz.OP_MAP, "", "")]
    assert kernel_words("Ab ßa", mapped_then_meta, (False, True, True, True)) == [META + "ab", META + "ssa"]
    assert kernel_words(" ab", mapped_then_meta, (False, True, True, False)) == [META + "ab"]
    assert kernel_words("a\u3000b", mapped_then_meta, (True, True, True, True)) == [META + "a", META + "b"]
    assert kernel_words("a" + UNSUPPORTED, mapped_then_meta, (False, True, True, True)) is None
    assert kernel_words("", mapped_then_meta, (False, True, True, True)) == []


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=16), OPS, st.tuples(st.booleans(), st.booleans(), st.booleans(),
                                                                 st.booleans()))
def test_pre_tokenize_is_the_oracle(text, ops, pretok):
    assert kernel_words(text, ops, pretok) == oracle(text, ops, pretok)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab. ,", max_size=20), st.sets(st.sampled_from("ab.,")), st.sets(st.sampled_from("ab.,")))
def test_safe_cuts_are_the_spaces_between_chosen_characters(text, left, right):
    data = text.encode()
    array = np.frombuffer(data, dtype=np.uint8)
    cut_left = np.array([chr(b) in left for b in range(256)], dtype=np.uint8)
    cut_right = np.array([chr(b) in right for b in range(256)], dtype=np.uint8)
    out = np.empty(max(len(data), 1), np.int64)
    expected = [j for j in range(1, len(data) - 1)
                if data[j] == 32 and chr(data[j - 1]) in left and chr(data[j + 1]) in right]
    assert out[:safe_cuts(array, nz.CUT_DROP, cut_left, cut_right, out)].tolist() == expected
    assert safe_cuts(array, nz.CUT_NONE, cut_left, cut_right, out) == 0
