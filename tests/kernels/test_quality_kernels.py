"""The quality kernels (MinHash signatures, letters per script) against a slow, plain-Python
reference of the same algorithm: equal for every input, however it is cut into pieces."""

from __future__ import annotations

import unicodedata

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.text.quality import (
    FALLBACK_BYTES,
    MAX_TABLE_BITS,
    NUM_PERM,
    SAMPLE_SIXTEENTHS,
    MinHasher,
    minhash_signature,
    script_letter_counts,
    script_table,
)
from schemas.options import SCRIPT_NAMES
from tests.conftest import BOOKS

M64 = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
GOLDEN = 0x9E3779B97F4A7C15
SHINGLE_SALT, DENSIFY_SALT = 0x5A1D5A1D5A1D5A1D, 0xDE45DE45DE45DE45
EMPTY = M64


def _mix64(x: int) -> int:
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _word_byte(b: int) -> int:
    """The byte a word hashes (ASCII letters lower-cased), 0 at a word boundary."""
    if b < 0x80 and chr(b).isalpha():
        return b | 32
    return b if b >= 0x80 or chr(b).isdigit() else 0


def _words(data: bytes) -> list[int]:
    """FNV-1a hash of each word of data."""
    hashes, h, in_word = [], FNV_OFFSET, False
    for b in data + b" ":
        w = _word_byte(b)
        if w:
            h, in_word = ((h ^ w) * FNV_PRIME) & M64, True
        elif in_word:
            hashes.append(h)
            h, in_word = FNV_OFFSET, False
    return hashes


def _oph(words: list[int], seed: int, num_perm: int, slots: int, sample_below: int) -> tuple[list[int], int]:
    """One-permutation MinHash bins of the (sampled) word bigrams, each occurrence counted by the
    packed occurrence table (20-bit key, 12-bit count, linear probing, 3/4 fill); (bins, bigrams)."""
    out = [EMPTY] * num_perm
    table = [0] * slots
    fill, shingles = 0, 0
    for previous, word in zip(words, words[1:]):
        shingle = _mix64(((previous * GOLDEN) & M64) ^ word ^ seed) | 1
        if shingle >> 60 >= sample_below:
            continue
        key = (shingle >> 44) | 1
        slot = shingle & (slots - 1)
        occurrence = 1
        while True:
            entry = table[slot]
            if entry == 0:
                if fill < slots * 3 // 4:
                    table[slot] = (key << 12) | 1
                    fill += 1
                break
            if entry >> 12 == key:
                count = entry & 0xFFF
                if count < 0xFFF:
                    count += 1
                    table[slot] = entry + 1
                occurrence = count
                break
            slot = (slot + 1) & (slots - 1)
        value = _mix64(shingle ^ ((occurrence * GOLDEN) & M64)) if occurrence > 1 else _mix64(shingle)
        hashed = ((value >> 32) | (value << 32)) & M64
        out[value & (num_perm - 1)] = min(out[value & (num_perm - 1)], hashed)
        shingles += 1
    return out, shingles


def _densify(out: list[int], seed: int, num_perm: int) -> list[int]:
    filled = [v != EMPTY for v in out]
    dense = list(out)
    for j in range(num_perm):
        attempt = 0
        while not filled[j]:
            probe = _mix64(seed ^ DENSIFY_SALT ^ (j << 32) ^ attempt) % num_perm
            if filled[probe]:
                dense[j] = out[probe]
                break
            attempt += 1
    return dense


def reference_signature(data: bytes, total_bytes: int, seed: int = 0, num_perm: int = NUM_PERM) -> list[int]:
    """MinHasher(total_bytes, seed, num_perm) fed `data`, in plain Python."""
    seed ^= SHINGLE_SALT
    slots = 1 << min(MAX_TABLE_BITS, max(12, (total_bytes // 24).bit_length()))
    out, shingles = _oph(_words(data), seed, num_perm, slots, SAMPLE_SIXTEENTHS)
    if shingles:
        return _densify(out, seed, num_perm)
    out, shingles = _oph(_words(data[:FALLBACK_BYTES]), seed, num_perm, 1 << 12, 16)
    return _densify(out, seed, num_perm) if shingles else [EMPTY] * num_perm


_SCRIPTS = script_table()


def test_the_script_table_marks_the_letters_unicodedata_names():
    """Every code point of category L* (surrogates excepted) is a letter, of a listed script or Other;
    every other code point has no script (the table is built at once by numpy, checked here one code
    point at a time)."""
    letters = np.array([not 0xD800 <= cp < 0xE000 and unicodedata.category(chr(cp)).startswith("L")
                        for cp in range(_SCRIPTS.shape[0])])
    no_script = int(_SCRIPTS.max())
    assert (np.not_equal(_SCRIPTS, no_script) == letters).all()
    assert _SCRIPTS[ord("a")] == SCRIPT_NAMES.index("Latin") and _SCRIPTS[ord("\u65e5")] == SCRIPT_NAMES.index("Han")


def reference_letter_counts(data: bytes) -> list[int]:
    """Letters per script as the kernel decodes UTF-8: a lead byte takes as many continuation
    bytes, unchecked, as its bits say and the data still holds (a 4-byte lead 2 bytes before the
    end takes 2, with the 3-byte mask), a stray byte counts for nothing."""
    counts = [0] * (int(_SCRIPTS.max()) + 1)
    i = 0
    while i < len(data):
        b0 = data[i]
        cp, width = -1, 1
        if b0 < 0x80:
            cp = b0
        else:
            for lead, w in ((0xF0, 4), (0xE0, 3), (0xC0, 2)):
                if b0 >= lead and i + w - 1 < len(data):
                    cp, width = b0 & (0x7F >> w), w
                    for k in range(1, w):
                        cp = (cp << 6) | (data[i + k] & 0x3F)
                    break
        if 0 <= cp < _SCRIPTS.shape[0]:
            counts[_SCRIPTS[cp]] += 1
        elif cp >= 0:
            counts[-2] += 1  # a letter of no listed script
        i += width
    return counts


def test_the_reference_reads_unicode_letters():
    assert unicodedata.category("\u00e9") == "Ll"
    counts = reference_letter_counts("Ab1 \u00e9\u65e5\U0002000b\U00030000".encode())
    assert sum(counts[:-1]) == 6 and counts[-1] == 2  # 6 letters (one of no listed script), 2 others


_ATOMS = st.sampled_from([
    "word", "Word", "WORD", "a", "x1", "42", "2024", " ", "  ", "\t", "\n", "\n\n", "\r\n", ".", ",", "...", "--",
    "!?", "'s", "\u00e9t\u00e9", "\u00c9COLE", "\u65e5\u672c\u8a9e", "\u3053\u3093\u306b\u3061\u306f", "\uac00",
    "\u0416\u0443\u043a", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e",
    "\u0e44\u0e17\u0e22", "\U0001f600", "\U00020000", "\u00a0", "\u2003", "\x00", "\x7f", "_", "@", "`", "[", "{",
    "antidisestablishmentarianism" * 20, "\u00ad", "\ufeff",
])
_TEXTS = st.lists(_ATOMS, max_size=300).map("".join)


def _cuts(data: bytes, draw_positions: list[int]) -> list[bytes]:
    """data cut at the given positions (empty pieces where positions repeat), anywhere, even
    inside a UTF-8 sequence."""
    cuts = sorted(p % (len(data) + 1) for p in draw_positions)
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@settings(max_examples=150, deadline=None)
@given(_TEXTS, st.lists(st.integers(0, 1 << 20), max_size=12), st.integers(0, 1 << 22),
       st.sampled_from([0, 9, 0x4D696E48]), st.sampled_from([1, 8, 256]))
def test_signatures_in_pieces_equal_the_reference(text, positions, total_bytes, seed, num_perm):
    data = text.encode("utf-8", "surrogatepass")
    hasher = MinHasher(total_bytes, seed, num_perm)
    for piece in _cuts(data, positions):
        hasher.update(piece)
    assert hasher.signature().tolist() == reference_signature(data, total_bytes, seed, num_perm)


@settings(max_examples=150, deadline=None)
@given(st.one_of(_TEXTS.map(lambda text: text.encode("utf-8", "surrogatepass")), st.binary(max_size=300)),
       st.lists(st.integers(0, 1 << 20), max_size=6))
def test_letter_counts_in_pieces_equal_the_reference(data, positions):
    """Any bytes, malformed UTF-8 included, count as the reference counts them; UTF-8 text cut
    into pieces at character starts (as the text stream cuts) adds up to the whole."""
    assert script_letter_counts(data).tolist() == reference_letter_counts(data)
    try:
        data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return
    starts = [p for p in (p % (len(data) + 1) for p in positions) if p == len(data) or data[p] & 0xC0 != 0x80]
    counts = None
    for piece in _cuts(data, starts):
        counts = script_letter_counts(piece, counts)
    assert counts is None or counts.tolist() == reference_letter_counts(data)


def test_a_book_and_a_short_text_equal_the_reference():
    """A real book's start (its signature from the sampled bigrams) and a text too short to have
    a sampled bigram (signed by the fallback), cut into uneven pieces."""
    data = (BOOKS / sorted(p.name for p in BOOKS.glob("*.txt"))[0]).read_bytes()[:150_000]
    hasher = MinHasher(len(data), seed=5)
    for start in range(0, len(data), 7919):
        hasher.update(data[start:start + 7919])
    assert hasher.signature().tolist() == reference_signature(data, len(data), seed=5)
    assert script_letter_counts(data).tolist() == reference_letter_counts(data)
    short = b"Alpha beta, gamma delta epsilon!"  # 4 bigrams, none of them sampled (seed 0)
    assert _oph(_words(short), SHINGLE_SALT, NUM_PERM, 1 << 12, SAMPLE_SIXTEENTHS)[1] == 0
    assert minhash_signature(short).tolist() == reference_signature(short, len(short))
    assert minhash_signature(short)[0] != EMPTY
    assert np.all(minhash_signature(b"one") == EMPTY)


def test_a_long_text_without_a_sampled_bigram_is_signed_by_its_first_64_kb():
    """The fallback signs every bigram of the text's first FALLBACK_BYTES, a word cut there, fed in
    pieces that cross that boundary (its head is kept until a bigram is sampled: here, never)."""
    data = b"alpha Beta, gamma!  " * 6000  # 120 KB of three bigrams, none of them sampled (seed 0)
    assert _oph(_words(data), SHINGLE_SALT, NUM_PERM, 1 << 17, SAMPLE_SIXTEENTHS)[1] == 0
    assert data[FALLBACK_BYTES - 1: FALLBACK_BYTES + 1].isalpha()  # the boundary falls inside a word
    hasher = MinHasher(len(data))
    for start in range(0, len(data), 30_011):
        hasher.update(data[start:start + 30_011])
    expected = reference_signature(data, len(data))
    assert hasher.signature().tolist() == expected
    assert expected[0] != EMPTY
