"""The WordPiece kernel called directly on tables of a tiny vocabulary, against a plain-Python
oracle of what it promises: chunks at ASCII whitespace, words of LETTER characters through greedy
longest-match-first WordPiece, ISOLATED characters as their ids, and chunks holding an OTHER
character (or invalid UTF-8) left to the caller as fallback spans."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.common.utf8 import BMP
from pipeline.kernels.tokenizer.wordpiece.encode import (
    CHUNK_SPACE,
    INNER_SPACE,
    ISOLATED,
    LETTER,
    OTHER,
    CodePointTable,
    WordCache,
    WordPieceTables,
    encode_bytes,
)

VOCAB = {"[UNK]": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5, "ba": 6, "##a": 7, "##b": 8, "##bc": 9, "##ca": 10,
         "ss": 11, "##ss": 12, "##s": 13, "ß": 14}  # no "##c": "cc" matches nothing at its second letter
UNK, MAX_CHARS = 0, 6
# LETTER: a b c s (upper case folded), ß normalised to "ss", the soft hyphen deleted; ISOLATED: , and -
# (the dash as two ids, as a tokenizer may split one character); INNER_SPACE: NBSP; the rest OTHER.
LETTERS = {"a": "a", "b": "b", "c": "c", "s": "s", "A": "a", "B": "b", "C": "c", "ß": "ss", "\u00ad": ""}
ISOLATED_IDS = {",": [20], "-": [21, 21]}
ALPHABET = "abcsABCß\u00ad,-\u00a0 \t\né?z"


def tables() -> WordPieceTables:
    kinds = np.full(BMP, OTHER, dtype=np.uint8)
    starts = np.zeros(BMP, dtype=np.int32)
    lengths = np.zeros(BMP, dtype=np.int32)
    letters, isolated = b"", []
    for char in " \t\r\n":
        kinds[ord(char)] = CHUNK_SPACE
    kinds[0xA0] = INNER_SPACE
    for char, out in LETTERS.items():
        kinds[ord(char)], starts[ord(char)], lengths[ord(char)] = LETTER, len(letters), len(out)
        letters += out.encode()
    for char, ids in ISOLATED_IDS.items():
        kinds[ord(char)], starts[ord(char)], lengths[ord(char)] = ISOLATED, len(isolated), len(ids)
        isolated += ids
    code_points = CodePointTable(kinds=kinds, starts=starts, lengths=lengths,
                                 letters=np.frombuffer(letters, dtype=np.uint8).copy(),
                                 isolated_ids=np.array(isolated, dtype=np.int32))
    return WordPieceTables.build(VOCAB, "##", UNK, MAX_CHARS, code_points)


TABLES = tables()
CACHE = WordCache.empty(1 << 4)  # shared by every example, small: hits, misses and evictions


def wordpiece(word: str) -> list[int]:
    """Greedy longest match first, the whole word [UNK] when too long or when some position matches nothing."""
    if len(word) > MAX_CHARS:
        return [UNK]
    ids, position = [], 0
    while position < len(word):
        for end in range(len(word), position, -1):
            piece = word[position:end] if position == 0 else "##" + word[position:end]
            if piece in VOCAB:
                ids.append(VOCAB[piece])
                position = end
                break
        else:
            return [UNK]
    return ids


def chunk_ids(chunk: str) -> list[int] | None:
    """The ids of a chunk (no ASCII whitespace inside), or None when it holds an OTHER character."""
    ids, word = [], ""
    for char in chunk:
        if char in LETTERS:
            word += LETTERS[char]
            continue
        if char not in ISOLATED_IDS and char != "\u00a0":
            return None
        if word:
            ids += wordpiece(word)
        word = ""
        ids += ISOLATED_IDS.get(char, [])
    return ids + (wordpiece(word) if word else [])


def oracle(data: bytes) -> tuple[list[int], list[tuple[int, int, int]]]:
    """(ids, fallback spans (byte start, byte stop, position in ids)), consecutive fallback chunks
    (only whitespace between them) joined into one span."""
    ids, spans, i, open_span = [], [], 0, False
    while i < len(data):
        if data[i] in b" \t\r\n":
            i += 1
            continue
        j = i
        while j < len(data) and data[j] not in b" \t\r\n":
            j += 1
        try:
            found = chunk_ids(data[i:j].decode("utf-8"))
        except UnicodeDecodeError:
            found = None
        if found is not None:
            ids += found
            open_span = False
        elif open_span:
            spans[-1] = (spans[-1][0], j, spans[-1][2])
        else:
            spans.append((i, j, len(ids)))
            open_span = True
        i = j
    return ids, spans


def run(data: bytes) -> tuple[list[int], list[tuple[int, int, int]]]:
    ids, spans = encode_bytes(np.frombuffer(data, dtype=np.uint8), TABLES, CACHE)
    return ids.tolist(), [tuple(row) for row in spans.tolist()]


def test_known_words_pieces_unknowns_and_fallback():
    cases = {
        "abc": [5], "abca": [5, 7], "Abcbc": [5, 9], "cab": [3, 7, 8], "cc": [0], "cca": [3, 10], "aaaaaaa": [0],
        "aaaaaa": [1, 7, 7, 7, 7, 7], "ßss": [11, 12], "ßßßß": [0], "s": [0], "ass": [1, 12], "a\u00adb": [4], "ab,ba": [4, 20, 6],
        "a-": [1, 21, 21], "a\u00a0b": [1, 2], ",,": [20, 20], "\u00ad": [],
    }
    for text, ids in cases.items():
        assert run(text.encode()) == (ids, []), text
    assert run("ab é ab".encode()) == ([4, 4], [(3, 5, 1)])
    assert run("ab éa? z ab ?".encode()) == ([4, 4], [(3, 9, 1), (13, 14, 2)])  # whitespace joins spans
    assert run(b"abcd") == ([], [(0, 4, 0)])
    assert run(b"ab \xff\xfe b") == ([4, 2], [(3, 5, 1)])  # invalid UTF-8: a fallback span too


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
def test_the_kernel_is_the_oracle_on_generated_text(text):
    data = text.encode("utf-8")
    assert run(data) == oracle(data)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet=ALPHABET, max_size=6).map(str.encode), st.binary(max_size=3)), max_size=8))
def test_the_kernel_is_the_oracle_on_bytes_that_may_be_invalid(parts):
    data = b"".join(parts)
    assert run(data) == oracle(data)
