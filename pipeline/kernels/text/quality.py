"""What goes into training: the Unicode script mix of a text, and MinHash signatures of its word
shingles for near-duplicate detection (numba, over UTF-8 bytes).

Shingles are word bigrams taken as a multiset (the k-th occurrence of a bigram is its own
element), so the estimated similarity is the weighted Jaccard similarity of the bigram counts: two
editions of a book that differ in 5% of their words score about 0.95**2 / (2 - 0.95**2) = 0.82,
two books by one author about 0.1-0.3.

MinHash here is one-permutation hashing with optimal densification (Shrivastava, 2017): every
shingle is hashed once and lands in one of `NUM_PERM` bins, each bin keeps its minimum, and an
empty bin borrows the value of the next non-empty bin found by a seeded probe. The probability
that two signatures agree in a bin is the Jaccard similarity of the two shingle sets, as with
`NUM_PERM` independent permutations, at the cost of one hash a shingle instead of `NUM_PERM`.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.hashing import FNV_OFFSET, FNV_PRIME, mix64, mix64_array
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8
from pipeline.kernels.common.prefetch import prefetch_row
from pipeline.kernels.common.utf8 import decode_lenient
from schemas.options import SCRIPT_NAMES, SCRIPT_OTHER

NUM_PERM = 256  # signature length: the similarity estimate has a standard deviation of at most 0.03
BANDS = 64  # 64 bands of 4 values: a pair becomes a candidate with p 0.98 at J 0.5, 0.41 at 0.3, 0.006 at 0.1
MAX_TABLE_BITS = 23  # the occurrence table of one input: at most 8M slots (64 MB)
_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_FNV_OFFSET = FNV_OFFSET
_FNV_PRIME = FNV_PRIME
_SHINGLE_SALT = np.uint64(0x5A1D5A1D5A1D5A1D)
_DENSIFY_SALT = np.uint64(0xDE45DE45DE45DE45)
_S32 = np.uint64(32)
_S44 = np.uint64(44)
_S60 = np.uint64(60)
# Bigrams whose hash's top 4 bits are below this take part (4/16: a quarter, chosen by content, so
# the same bigrams in every text): the estimate stays unbiased, each signature costs a quarter of
# the table probes and hashes, and a book still has tens of thousands of sampled bigrams.
SAMPLE_SIXTEENTHS = 4
FALLBACK_BYTES = 1 << 16  # a text with no sampled bigram is signed by every bigram of its start
_GOLDEN_ODD = np.uint64(0x9E3779B97F4A7C15)
SIGN_BLOCK = 1 << 14  # bytes of text a signature kernel loop takes at a time (its words stay in L1/L2)
PREFETCH_AHEAD = 16  # sampled bigrams between a table slot's prefetch and its probe

# Unicode blocks per script (start, stop exclusive, index into SCRIPT_NAMES); anything else that is
# a letter counts as "Other", digits, punctuation, symbols and spaces count for no script.
_SCRIPT_RANGES = (
    (0x0041, 0x005B, "Latin"), (0x0061, 0x007B, "Latin"), (0x00C0, 0x0250, "Latin"), (0x1E00, 0x1F00, "Latin"),
    (0x0370, 0x0400, "Greek"), (0x1F00, 0x2000, "Greek"),
    (0x0400, 0x0530, "Cyrillic"),
    (0x0590, 0x0600, "Hebrew"),
    (0x0600, 0x0700, "Arabic"), (0x0750, 0x0780, "Arabic"),
    (0x0900, 0x0980, "Devanagari"),
    (0x0E00, 0x0E80, "Thai"),
    (0x1100, 0x1200, "Hangul"), (0xAC00, 0xD7B0, "Hangul"),
    (0x3040, 0x30A0, "Hiragana"), (0x30A0, 0x3100, "Katakana"),
    (0x3400, 0x4DC0, "Han"), (0x4E00, 0xA000, "Han"), (0xF900, 0xFB00, "Han"), (0x20000, 0x30000, "Han"),
)
SCRIPT_TABLE_SIZE = 0x30000
# The byte a word hashes for each input byte (ASCII letters lower-cased), 0 for a word boundary.
_WORD_BYTE = np.array([b | 32 if chr(b).isalpha() and b < 0x80 else b if (b >= 0x80 or chr(b).isdigit()) else 0
                       for b in range(256)], dtype=np.uint8)
OTHER_LETTER = len(SCRIPT_NAMES)  # the "Other" slot, after the named scripts
NO_SCRIPT = OTHER_LETTER + 1
_LATIN = SCRIPT_NAMES.index("Latin")  # the script of the ASCII letters
# SWAR constants for 8 ASCII bytes at once: a byte b | 0x20 is a letter iff 0x61 <= it < 0x7B, tested
# by adding 0x80 - 0x61 and 0x80 - 0x7B to each byte (no carry crosses bytes below 0x80).
_HIGH_BITS = np.uint64(0x8080808080808080)
_CASE_BITS = np.uint64(0x2020202020202020)
_FROM_A = np.uint64(0x1F1F1F1F1F1F1F1F)
_PAST_Z = np.uint64(0x0505050505050505)
_BYTE_ONES = np.uint64(0x0101010101010101)


def script_table() -> np.ndarray:
    """uint8, shape (SCRIPT_TABLE_SIZE,): the script index of each code point, NO_SCRIPT for
    characters of no script, OTHER_LETTER for letters of unlisted scripts.

    A letter is a code point of Unicode category L* (`str.isalpha` of one character, which numpy's
    `char.isalpha` asks of the interpreter's Unicode database for all of them at once: ~5 ms, where
    `unicodedata.category` one code point at a time took ~35 ms of every process that counts scripts)."""
    table = np.full(SCRIPT_TABLE_SIZE, NO_SCRIPT, dtype=np.uint8)
    letters = np.char.isalpha(np.arange(SCRIPT_TABLE_SIZE, dtype=np.uint32).view("<U1"))
    letters[0xD800:0xE000] = False  # surrogates: no character
    table[letters] = OTHER_LETTER
    for start, stop, name in _SCRIPT_RANGES:
        letters = table[start:stop] != NO_SCRIPT
        table[start:stop][letters] = SCRIPT_NAMES.index(name)
    return table


_TABLE: np.ndarray | None = None


@kernel()
def _script_counts(text, table, counts):
    """Count each character's script into counts. Eight ASCII bytes at a time (one load, letters
    counted by a SWAR range test); any other byte is decoded by `decode_lenient` (raw file bytes cut
    anywhere: continuation bytes unchecked), exactly as one character at a time would."""
    n = text.shape[0]
    i = 0
    ascii_letters = np.int64(0)
    ascii_others = np.int64(0)
    while i < n:
        if i + 8 <= n:
            chunk = load8(text, i)
            if chunk & _HIGH_BITS == 0:
                folded = chunk | _CASE_BITS
                letters = ((folded + _FROM_A) & ~(folded + _PAST_Z)) & _HIGH_BITS
                found = np.int64(((letters >> np.uint64(7)) * _BYTE_ONES) >> np.uint64(56))
                ascii_letters += found
                ascii_others += 8 - found
                i += 8
                continue
        cp, width = decode_lenient(text, i, n)
        if 0 <= cp < table.shape[0]:
            counts[table[cp]] += 1
        elif cp >= 0:
            counts[OTHER_LETTER] += 1
        i += width
    counts[_LATIN] += ascii_letters
    counts[NO_SCRIPT] += ascii_others


def script_letter_counts(data: bytes, counts: np.ndarray | None = None) -> np.ndarray:
    """int64, shape (NO_SCRIPT + 1,): letters of UTF-8 `data` per script (added to `counts` if given)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = script_table()
    if counts is None:
        counts = np.zeros(NO_SCRIPT + 1, dtype=np.int64)
    _script_counts(np.frombuffer(data, dtype=np.uint8), _TABLE, counts)
    return counts


def script_shares(counts: np.ndarray) -> dict[str, float]:
    """Share of the letters in each script that occurs ("Other" for letters of scripts not listed
    in SCRIPT_NAMES), rounded to 4 digits; {} without letters."""
    letters = int(counts[:NO_SCRIPT].sum())
    names = (*SCRIPT_NAMES, SCRIPT_OTHER)
    return {names[k]: round(int(counts[k]) / letters, 4) for k in range(NO_SCRIPT) if counts[k]} if letters else {}


def script_mix(data: bytes) -> dict[str, float]:
    """Share of the letters of UTF-8 `data` in each script (see script_shares)."""
    return script_shares(script_letter_counts(data))


def dominant_script(mix: dict[str, float]) -> str:
    """The script with the largest share ("" for a text without letters); ties by name."""
    return max(sorted(mix), key=lambda name: mix[name]) if mix else ""


@kernel()
def _word_hashes(text, start, stop, word_byte, h, in_word, words):
    """The FNV-1a hash of each word that ends in text[start:stop] into `words`, without a branch
    per byte: (hash of the unfinished word, in a word, words ended)."""
    n_ended = 0
    for i in range(start, stop):
        b = word_byte[text[i]]
        is_word = b != 0
        words[n_ended] = h
        n_ended += np.int64(in_word and not is_word)
        mixed = (h ^ np.uint64(b)) * _FNV_PRIME
        h = mixed if is_word else _FNV_OFFSET
        in_word = is_word
    return h, in_word, n_ended


@kernel()
def _word_hashes_split(text, start, stop, word_byte, h, in_word, words, later):
    """`_word_hashes` as two independent hash chains, which the core runs side by side (one chain
    is a multiply and a select a byte, latency-bound): text[start:stop] is cut at the first word
    boundary after its middle; the second half starts outside a word, its words go to `later`,
    then after the first half's."""
    middle = start + (stop - start) // 2
    while middle < stop and word_byte[text[middle]] != 0:
        middle += 1
    if middle == stop:
        return _word_hashes(text, start, stop, word_byte, h, in_word, words)
    length = min(middle - start, stop - middle)
    first = text[start:start + length]
    second = text[middle:middle + length]
    h2 = _FNV_OFFSET
    in_word2 = False
    n_ended = 0
    n_later = 0
    for k in range(length):
        b = word_byte[first[k]]
        is_word = b != 0
        words[n_ended] = h
        n_ended += np.int64(in_word and not is_word)
        mixed = (h ^ np.uint64(b)) * _FNV_PRIME
        h = mixed if is_word else _FNV_OFFSET
        in_word = is_word
        b2 = word_byte[second[k]]
        is_word2 = b2 != 0
        later[n_later] = h2
        n_later += np.int64(in_word2 and not is_word2)
        mixed2 = (h2 ^ np.uint64(b2)) * _FNV_PRIME
        h2 = mixed2 if is_word2 else _FNV_OFFSET
        in_word2 = is_word2
    h, in_word, more = _word_hashes(text, start + length, middle, word_byte, h, in_word, words[n_ended:])
    n_ended += more
    if in_word:  # the boundary byte at `middle` ends the first half's last word
        words[n_ended] = h
        n_ended += 1
    h2, in_word2, more = _word_hashes(text, middle + length, stop, word_byte, h2, in_word2, later[n_later:])
    n_later += more
    words[n_ended:n_ended + n_later] = later[:n_later]
    return h2, in_word2, n_ended + n_later


@kernel()
def _signature_update(text, word_byte, seed, num_perm, out, table, sample_below, state, final):
    """OPH MinHash of the multiset of word bigrams of text (ASCII letters lower-cased, words split
    at ASCII whitespace and punctuation; other bytes belong to words): the k-th occurrence of a
    bigram is its own element, so the estimate is the weighted (multiset) Jaccard similarity.

    Resumable: `state` (uint64: word hash, in-word flag, words, previous word, bigrams, table fill)
    carries a word across calls; `final` ends the last word.

    The text goes in blocks of SIGN_BLOCK bytes, each in three loops, so that the per-byte loop has
    no branch to mispredict at each word's end: (1) the FNV-1a hash of every word ending in the
    block (a select resets the hash, a word's end appends it), (2) each bigram's hash, kept when
    sampled, (3) the occurrence table and the bins, for the sampled bigrams only."""
    h = state[0]
    in_word = state[1] != 0
    n_words = np.int64(state[2])
    previous = state[3]
    n_shingles = np.int64(state[4])
    fill = np.int64(state[5])
    max_fill = table.shape[0] * 3 // 4
    table_mask = np.uint64(table.shape[0] - 1)
    table_index_mask = table.shape[0] - 1
    bin_mask = np.uint64(num_perm - 1)
    rows = table.reshape((table.shape[0], 1))
    n = text.shape[0]
    words = np.empty(min(n, SIGN_BLOCK) + 1, dtype=np.uint64)
    later = np.empty(min(n, SIGN_BLOCK) // 2 + 1, dtype=np.uint64)
    start = 0
    while start < n or final:
        stop = min(start + SIGN_BLOCK, n)
        h, in_word, n_ended = _word_hashes_split(text, start, stop, word_byte, h, in_word, words, later)
        if stop == n and final:
            if in_word:
                words[n_ended] = h
                n_ended += 1
                h = _FNV_OFFSET
                in_word = False
            final = False
        first = 0
        if n_words == 0 and n_ended > 0:
            previous = words[0]
            first = 1
        n_words += n_ended
        n_sampled = 0
        for j in range(first, n_ended):
            word = words[j]
            shingle = mix64((previous * _GOLDEN_ODD) ^ word ^ seed) | np.uint64(1)
            previous = word
            words[n_sampled] = shingle  # a fixed, content-based sample of the bigrams
            n_sampled += np.int64((shingle >> _S60) < sample_below)  # never 0, the empty slot of the table
        for j in range(n_sampled):
            if j + PREFETCH_AHEAD < n_sampled:  # the slot of a bigram a few ahead: its cache line comes meanwhile
                prefetch_row(rows, np.int64(words[j + PREFETCH_AHEAD] & table_mask))
            shingle = words[j]
            # Its occurrence number: a slot packs 20 bits of the bigram's hash and a 12-bit count, so the
            # table is small enough to stay in cache (a count saturates at 4095; a 20-bit key clash within
            # one probe run merges two bigrams' counts: rare, and the same for every run).
            key = np.uint32((shingle >> _S44) | np.uint64(1))
            slot_t = np.int64(shingle & table_mask)
            occurrence = np.uint32(1)
            while True:
                entry = table[slot_t]
                if entry == 0:
                    if fill < max_fill:
                        table[slot_t] = (key << np.uint32(12)) | np.uint32(1)
                        fill += 1
                    break
                if (entry >> np.uint32(12)) == key:
                    count = entry & np.uint32(0xFFF)
                    if count < np.uint32(0xFFF):
                        count += np.uint32(1)
                        table[slot_t] = entry + np.uint32(1)
                    occurrence = count
                    break
                slot_t = (slot_t + 1) & table_index_mask
            # mix64 of the shingle, salted from its second occurrence on (a select, not a branch)
            salt = np.uint64(occurrence) * _GOLDEN_ODD if occurrence > 1 else np.uint64(0)
            value = mix64(shingle ^ salt)
            bin_index = np.int64(value & bin_mask)
            hashed = value >> _S32 | (value << _S32)
            out[bin_index] = min(hashed, out[bin_index])
        n_shingles += n_sampled
        start = stop
    state[0] = h
    state[1] = np.uint64(1) if in_word else np.uint64(0)
    state[2] = np.uint64(n_words)
    state[3] = previous
    state[4] = np.uint64(n_shingles)
    state[5] = np.uint64(fill)


@kernel()
def _densify(out, seed, num_perm):
    """Optimal densification: an empty bin copies the first originally non-empty bin that its own
    seeded sequence of probes finds."""
    filled = out != _EMPTY
    for j in range(num_perm):
        if filled[j]:
            continue
        attempt = np.uint64(0)
        while True:
            probe = np.int64(mix64(seed ^ _DENSIFY_SALT ^ (np.uint64(j) << _S32) ^ attempt) % np.uint64(num_perm))
            if filled[probe]:
                out[j] = out[probe]
                break
            attempt += np.uint64(1)


class MinHasher:
    """The MinHash signature of a text fed in pieces (`update`), equal to `minhash_signature` of
    the whole; `total_bytes` (the whole text's length) sizes the occurrence table.

    A short text may have no sampled bigram at all (each is sampled with p 1/4: a 12-word text has
    none with p 0.04); its signature then comes from all the bigrams of its first FALLBACK_BYTES,
    so two unrelated short texts do not get the same all-empty signature (which scored 1.0)."""

    def __init__(self, total_bytes: int, seed: int = 0, num_perm: int = NUM_PERM) -> None:
        if num_perm < 1 or num_perm & (num_perm - 1):
            raise ValueError(f"num_perm must be a power of two, got {num_perm}")
        self._out = np.full(num_perm, _EMPTY, dtype=np.uint64)
        slots = 1 << min(MAX_TABLE_BITS, max(12, (total_bytes // 24).bit_length()))  # 1-2 slots a sampled bigram
        self._table = np.zeros(slots, dtype=np.uint32)
        self._seed = np.uint64(seed ^ _SHINGLE_SALT)
        self._num_perm = num_perm
        self._state = np.array([_FNV_OFFSET, 0, 0, 0, 0, 0], dtype=np.uint64)
        # The text's first FALLBACK_BYTES, kept only until a bigram is sampled (most texts: within
        # their first lines), so the fallback signature is computed only for a text that needs it.
        self._head: list[bytes] | None = []
        self._head_bytes = 0
        self._fallback: np.ndarray | None = None

    def update(self, data: bytes, final: bool = False) -> None:
        _signature_update(np.frombuffer(data, dtype=np.uint8), _WORD_BYTE, self._seed, self._num_perm, self._out,
                          self._table, np.uint64(SAMPLE_SIXTEENTHS), self._state, final)
        if self._head is None:
            return
        if self._state[4]:
            self._head = None  # a bigram is sampled: the fallback will not be needed
        elif self._head_bytes < FALLBACK_BYTES:
            head = bytes(data[: FALLBACK_BYTES - self._head_bytes])
            self._head.append(head)
            self._head_bytes += len(head)

    def signature(self) -> np.ndarray:
        """uint64, shape (num_perm,); all 2**64-1 when the text has fewer than two words."""
        self.update(b"", final=True)
        if self._state[4]:
            _densify(self._out, self._seed, self._num_perm)
            return self._out
        if self._fallback is None:
            self._fallback = self._fallback_signature(b"".join(self._head or ()))
        return self._fallback if self._fallback is not None else self._out

    def _fallback_signature(self, head: bytes) -> np.ndarray | None:
        """The signature of every bigram of `head` (the text's start), None if it has none."""
        out = np.full(self._num_perm, _EMPTY, dtype=np.uint64)
        state = np.array([_FNV_OFFSET, 0, 0, 0, 0, 0], dtype=np.uint64)
        _signature_update(np.frombuffer(head, dtype=np.uint8), _WORD_BYTE, self._seed, self._num_perm, out,
                          np.zeros(1 << 12, dtype=np.uint32), np.uint64(16), state, True)
        if not state[4]:
            return None
        _densify(out, self._seed, self._num_perm)
        return out


def is_empty_signature(signature: np.ndarray) -> bool:
    """Whether a signature is that of a text with fewer than two words (it resembles nothing)."""
    return bool((signature == _EMPTY).all())


def minhash_signature(data: bytes, seed: int = 0, num_perm: int = NUM_PERM) -> np.ndarray:
    """uint64, shape (num_perm,): the MinHash signature of the word bigrams of UTF-8 `data`
    (all 2**64-1 when the text has fewer than two words)."""
    hasher = MinHasher(len(data), seed, num_perm)
    hasher.update(data)
    return hasher.signature()


def signature_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The estimated Jaccard similarity of two signatures: the share of equal values."""
    if a.shape != b.shape:
        raise ValueError(f"signatures of different lengths: {a.shape} and {b.shape}")
    if is_empty_signature(a) or is_empty_signature(b):
        return 0.0  # a text of fewer than two words has no bigram to share
    return float(np.mean(a == b))


def band_hashes(signature: np.ndarray, bands: int = BANDS) -> list[int]:
    """One 64-bit hash per band of `signature`: two signatures share a band's hash when they agree
    on all its values (the locality-sensitive hashing candidates)."""
    if signature.shape[0] % bands:
        raise ValueError(f"{signature.shape[0]} values do not split into {bands} bands")
    rows = np.ascontiguousarray(signature, dtype=np.uint64).reshape(bands, -1)
    h = np.arange(bands, dtype=np.uint64)  # all bands at once: h = mix64(h ^ value) along each band
    for column in range(rows.shape[1]):
        h = mix64_array(h ^ rows[:, column])
    return [int(v) for v in h]
