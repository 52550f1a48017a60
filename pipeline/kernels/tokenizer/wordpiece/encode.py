"""BERT-style WordPiece tokenization in one jitted pass over UTF-8 bytes.

The kernel reproduces what a BERT-style tokenizer (a per-character normalizer, `BertPreTokenizer`,
`WordPiece`) does, from a table that says, for every BMP code point, how that tokenizer treats it
on its own (built by `pipeline.tokenizer.wordpiece.fast` by asking the real tokenizer):

- CHUNK_SPACE (ASCII space, tab, CR, LF): every BERT-style normalizer and pre-tokenizer splits
  there, so the text between two of them (a *chunk*) is tokenized independently of its neighbours;
- LETTER: joins the word around it as a fixed UTF-8 string (itself, lower-cased, accents
  stripped, a combining mark the normalizer keeps, or nothing for characters it deletes), where the
  probe proved that string the same in every context;
- ISOLATED: a piece of its own (punctuation, CJK ideographs), with fixed ids;
- INNER_SPACE: splits words (NBSP, ideographic space);
- OTHER: anything the table cannot vouch for (a mark or non-ASCII letter a composing normalizer
  may join with its neighbours, a code point beyond the BMP, invalid UTF-8).

Words (runs of LETTER characters, normalised) go through WordPiece: greedy longest match first,
continuation pieces looked up with their prefix stripped, the whole word `[UNK]` when it has more
characters than `max_input_chars_per_word` or when some position matches nothing. A chunk holding an OTHER
character is not tokenized here: maximal runs of such chunks (with the whitespace between them)
are returned as *fallback spans* for the real tokenizer, and their ids are spliced in at the
recorded position. A span starts and ends at a split point, so encoding it alone gives exactly the
ids it gets inside the whole text.

The vocabulary lives in two open-addressing hash tables of byte strings (word starts, and
continuations without their prefix; `pipeline.kernels.common.hash_table.ByteTable`), keys compared byte
for byte on every hit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hash_table import FNV_OFFSET, ByteTable, hash_bytes, hash_step
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.spans import add_span
from pipeline.kernels.common.string_arrays import StringArrays
from pipeline.kernels.common.utf8 import decode_bmp

CHUNK_SPACE, LETTER, ISOLATED, INNER_SPACE, OTHER = 0, 1, 2, 3, 4
_HIGH_BITS = np.uint64(0xFFFFFFFFFFFF0000)  # a cache key is the hash's high bits and the word length
CACHE_SLOTS = 1 << 16  # words (not single vocabulary entries) remembered per tokenizer: about 6 MB
CACHE_WORD_BYTES = 32
CACHE_IDS = 16  # a count, then up to 15 ids
MAX_FALLBACK_BYTES = 1 << 16  # a fallback span is cut at a chunk boundary past this size
MAX_WORD_BYTES = 1 << 16  # a longer word is [UNK] whatever max_input_chars_per_word says (<= 100 in practice)


@kernel()
def _fill_records(blob, starts, lengths, ids, slots, records):
    """records[s] = (hash, length | id << 32, the key's first 8 bytes, its start) of the key in slot s."""
    for s in range(slots.shape[0]):
        if slots[s] == 0:
            continue
        entry = slots[s] - 1
        base = starts[entry]
        n = lengths[entry]
        records[s, 0] = hash_bytes(blob, base, base + n)
        records[s, 1] = np.uint64(n) | (np.uint64(ids[entry]) << np.uint64(32))
        head = np.uint64(0)
        for k in range(min(n, 8)):
            head |= np.uint64(blob[base + k]) << np.uint64(8 * k)
        records[s, 2] = head
        records[s, 3] = np.uint64(base)


def packed_records(table: ByteTable) -> np.ndarray:
    """uint64 (slots, 4): the table's keys in slot order, one 32-byte record each (`_find`)."""
    records = np.zeros((table.slots.shape[0], 4), dtype=np.uint64)
    _fill_records(table.blob, table.starts, table.lengths, table.ids, table.slots, records)
    return records


@kernel()
def _find(h, word, start, stop, records, blob):
    """The id of word[start:stop] (FNV-1a hash h) among `packed_records`, or -1: a key's hash, length,
    id and first 8 bytes share its record, so a lookup reads one record (one cache line; the key's
    bytes past 8 only when they all match), where `lookup` reads the slot, the key's length and start,
    its bytes and its id from five arrays (1.1-1.45x the whole kernel's speed, issue 33)."""
    mask = np.uint64(records.shape[0] - 1)
    slot = h & mask
    n = np.uint64(stop - start)
    while True:
        meta = records[slot, 1]
        if meta == 0:
            return -1
        if records[slot, 0] == h and (meta & np.uint64(0xFFFFFFFF)) == n:
            head = np.uint64(0)
            for k in range(min(stop - start, 8)):
                head |= np.uint64(word[start + k]) << np.uint64(8 * k)
            if head == records[slot, 2]:
                base = np.int64(records[slot, 3])
                same = True
                for k in range(8, stop - start):
                    if blob[base + k] != word[start + k]:
                        same = False
                        break
                if same:
                    return np.int64(meta >> np.uint64(32))
        slot = (slot + np.uint64(1)) & mask


@kernel()
def _encode_kernel(text, ascii_letter, cp_class, cp_start, cp_len, letters, isolated_ids, unk_id, max_chars,
                   max_key,
                   w_records, w_blob, c_records, c_blob,
                   cache_keys, cache_words, cache_ids, out, spans, max_span_bytes):
    """Tokenize text; returns (n_out, n_spans). spans[k] = (byte start, byte stop, position in out).

    A chunk is tokenized optimistically; at its first OTHER character the chunk's ids are dropped
    and the chunk joins (or opens) a fallback span. WordPiece is written out inline at the one
    place a word ends: a helper taking the ten table arrays cost ten times the lookup itself, and
    the same helper compiled into the kernel (numba's inline="always") made the kernel 2-3 times
    slower on English books.

    Words that are not one vocabulary entry are split once and kept in a direct-mapped cache
    (cache_keys: hash and length, cache_words: the word's bytes, cache_ids: count then ids); a hit
    is checked byte for byte, so the cache changes the speed, never the ids."""
    cache_mask = cache_keys.shape[0] - 1
    n = text.shape[0]
    word = np.empty(MAX_WORD_BYTES + 8, dtype=np.uint8)
    n_out = 0
    n_spans = 0
    open_span = False
    i = 0
    while i < n:
        b = text[i]
        if b == 32 or b == 9 or b == 10 or b == 13:
            i += 1
            continue
        chunk_out = n_out
        n_word = 0
        n_tail = 0  # UTF-8 continuation bytes in the word: it holds n_word - n_tail characters
        word_hash = FNV_OFFSET
        j = i
        fast = True
        while True:
            kind = CHUNK_SPACE  # the chunk ends at the next ASCII whitespace byte or the end of the text
            cp = 0
            width = 1
            if j < n:
                b = text[j]
                if ascii_letter[b] != 0:  # the common case: an ASCII letter or digit, one byte
                    if n_word < MAX_WORD_BYTES:
                        word[n_word] = ascii_letter[b]
                    word_hash = hash_step(word_hash, ascii_letter[b])
                    n_word += 1
                    j += 1
                    continue
                if not (b == 32 or b == 9 or b == 10 or b == 13):
                    if b < 0x80:  # ASCII inline: the decoder is for the few multi-byte characters
                        cp = np.int64(b)
                    else:
                        cp, width = decode_bmp(text, j, n)
                    kind = OTHER if cp < 0 else cp_class[cp]
            if kind == LETTER:
                for k in range(cp_start[cp], cp_start[cp] + cp_len[cp]):
                    if n_word < MAX_WORD_BYTES:
                        word[n_word] = letters[k]
                    word_hash = hash_step(word_hash, letters[k])
                    n_word += 1
                    if letters[k] & 0xC0 == 0x80:
                        n_tail += 1
                j += width
                continue
            if kind == OTHER or (n_word > MAX_WORD_BYTES and n_word - n_tail <= max_chars):
                fast = False  # (a word past the buffer that is not [UNK] by its length: the real tokenizer)
                break
            if n_word - n_tail > max_chars:
                out[n_out] = unk_id
                n_out += 1
            elif n_word > 0:
                # WordPiece: greedy longest match first. The whole word is tried first (most words
                # are one vocabulary entry, and a whole hit is the longest match), then the cache.
                h = word_hash  # FNV of the word, hashed as its letters arrived
                whole = -1
                if n_word <= max_key:
                    whole = _find(h, word, 0, n_word, w_records, w_blob)
                if whole >= 0:
                    out[n_out] = whole
                    n_out += 1
                else:
                    slot = np.int64(h & np.uint64(cache_mask))
                    key = (h & _HIGH_BITS) | np.uint64(n_word)
                    hit = cache_keys[slot] == key
                    if hit:
                        for k in range(n_word):
                            if cache_words[slot, k] != word[k]:
                                hit = False
                                break
                    if hit:
                        for k in range(cache_ids[slot, 0]):
                            out[n_out] = cache_ids[slot, k + 1]
                            n_out += 1
                    else:
                        first = n_out
                        position = 0
                        while position < n_word:
                            best_end = -1
                            best_id = -1
                            if position > 0 and n_word - position <= max_key:
                                h = FNV_OFFSET
                                for k in range(position, n_word):
                                    h = hash_step(h, word[k])
                                best_id = _find(h, word, position, n_word, c_records, c_blob)
                                if best_id >= 0:
                                    best_end = n_word
                            if best_end < 0:
                                h = FNV_OFFSET
                                for end in range(position + 1, min(n_word - 1, position + max_key) + 1):
                                    h = hash_step(h, word[end - 1])
                                    if position == 0:
                                        found = _find(h, word, position, end, w_records, w_blob)
                                    else:
                                        found = _find(h, word, position, end, c_records, c_blob)
                                    if found >= 0:
                                        best_end = end
                                        best_id = found
                            if best_end < 0:  # some position matches nothing: the whole word is [UNK]
                                n_out = first
                                out[n_out] = unk_id
                                n_out += 1
                                break
                            out[n_out] = best_id
                            n_out += 1
                            position = best_end
                        if n_word <= cache_words.shape[1] and n_out - first < cache_ids.shape[1]:
                            cache_keys[slot] = key
                            for k in range(n_word):
                                cache_words[slot, k] = word[k]
                            cache_ids[slot, 0] = n_out - first
                            for k in range(n_out - first):
                                cache_ids[slot, k + 1] = out[first + k]
            n_word = 0
            n_tail = 0
            word_hash = FNV_OFFSET
            if kind == CHUNK_SPACE:
                break
            for k in range(cp_start[cp], cp_start[cp] + cp_len[cp]):  # ISOLATED (INNER_SPACE has none)
                out[n_out] = isolated_ids[k]
                n_out += 1
            j += width
        if fast:
            open_span = False
            i = j
            continue
        n_out = chunk_out
        while j < n and not (text[j] == 32 or text[j] == 9 or text[j] == 10 or text[j] == 13):
            j += 1
        n_spans = add_span(spans, n_spans, open_span and j - spans[n_spans - 1, 0] <= max_span_bytes, i, j, n_out)
        open_span = True
        i = j
    return n_out, n_spans


@dataclass(frozen=True)
class CodePointTable:
    """How a tokenizer treats each BMP code point on its own.

    Attributes:
        kinds: uint8, shape (BMP,): CHUNK_SPACE, LETTER, ISOLATED, INNER_SPACE or OTHER.
        starts, lengths: int32, shape (BMP,): where a LETTER's normalised bytes lie in `letters`, or
            an ISOLATED character's ids in `isolated_ids`.
        letters: uint8: normalised UTF-8 of the LETTER code points, one after another.
        isolated_ids: int32: ids of the ISOLATED code points, one after another.
    """

    kinds: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    letters: np.ndarray
    isolated_ids: np.ndarray


def _ids_per_byte(cps: CodePointTable) -> int:
    """The most ids one byte of text can give, rounded up (the output buffer's size a byte): a code
    point of w UTF-8 bytes gives its fixed ids (ISOLATED) or at most one id a character of its output
    (LETTER: every WordPiece piece, and a word's one [UNK], holds a character at least), for w bytes
    of text (a Hangul syllable's three jamo: one id a byte, not nine)."""
    points = np.arange(cps.kinds.shape[0])
    width = 1 + (points >= 0x80) + (points >= 0x800)
    starts = cps.starts.astype(np.int64)
    lengths = cps.lengths.astype(np.int64)
    heads = np.zeros(cps.letters.shape[0] + 1, dtype=np.int64)  # UTF-8 lead bytes before each offset
    np.cumsum((cps.letters & 0xC0) != 0x80, out=heads[1:])
    letter = cps.kinds == LETTER
    chars = np.where(letter, heads[np.minimum(starts + lengths, heads.shape[0] - 1)] - heads[np.minimum(
        starts, heads.shape[0] - 1)], 0)
    counts = np.where(cps.kinds == ISOLATED, lengths, chars)
    return max(1, int(np.max(-(-counts // width))))


def _ascii_letters(cps: CodePointTable) -> np.ndarray:
    """uint8, shape (256,): the normalised byte of each ASCII LETTER that maps to one byte, else 0."""
    out = np.zeros(256, dtype=np.uint8)
    for byte in range(1, 0x80):
        if cps.kinds[byte] == LETTER and cps.lengths[byte] == 1:
            out[byte] = cps.letters[cps.starts[byte]]
    return out


@dataclass(frozen=True)
class WordPieceTables:
    """What the kernel needs of a WordPiece vocabulary (its keys as UTF-8) and its tokenizer."""

    words: ByteTable
    continuations: ByteTable
    code_points: CodePointTable
    unk_id: int
    max_chars: int
    max_key: int
    ascii_letters: np.ndarray  # uint8 (256,): the normalised byte of each one-byte ASCII LETTER, else 0
    ids_per_byte: int  # the most ids a byte of text gives (`_ids_per_byte`)
    word_records: np.ndarray  # `packed_records` of `words`
    continuation_records: np.ndarray  # `packed_records` of `continuations`

    @classmethod
    def build(cls, vocab: dict[str, int], prefix: str, unk_id: int, max_chars: int,
              code_points: CodePointTable) -> WordPieceTables:
        """The tables of a vocabulary, in linear passes over its tokens as arrays (`StringArrays`).

        A word start is looked up as itself and a continuation as prefix + piece (the prefix may be
        "" or non-ASCII), both by their UTF-8 bytes. A match ends at a character boundary (every key
        is whole UTF-8), so the kernel's byte-wise longest match is the real tokenizer's character-wise
        one."""
        strings = StringArrays.of(list(vocab))
        ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
        lengths = strings.char_lengths()
        words = np.flatnonzero(lengths > 0)
        byte_lengths = np.diff(strings.utf8_starts)
        head = len(prefix)
        pieces = np.flatnonzero(strings.starting_with(prefix) & (lengths > head))
        skip = len(prefix.encode("utf-8", "surrogatepass"))
        piece_starts = strings.utf8_starts[pieces] + skip
        piece_lengths = strings.utf8_starts[pieces + 1] - piece_starts
        longest = int(max(byte_lengths[words].max(initial=1), piece_lengths.max(initial=1)))
        word_table = ByteTable.of_arrays(strings.utf8, strings.utf8_starts[words], byte_lengths[words], ids[words])
        piece_table = ByteTable.of_arrays(strings.utf8, piece_starts, piece_lengths, ids[pieces])
        return cls(word_table, piece_table, code_points, unk_id, max_chars, longest, _ascii_letters(code_points),
                   _ids_per_byte(code_points), packed_records(word_table), packed_records(piece_table))


@dataclass(frozen=True)
class WordCache:
    """The kernel's direct-mapped cache of split words (bounded: CACHE_SLOTS entries)."""

    keys: np.ndarray
    words: np.ndarray
    ids: np.ndarray

    @classmethod
    def empty(cls, slots: int = CACHE_SLOTS) -> WordCache:
        if slots & (slots - 1):
            raise ValueError(f"cache slots must be a power of two, got {slots}")
        return cls(keys=np.zeros(slots, dtype=np.uint64), words=np.zeros((slots, CACHE_WORD_BYTES), dtype=np.uint8),
                   ids=np.zeros((slots, CACHE_IDS), dtype=np.int32))


def encode_bytes(text: np.ndarray, tables: WordPieceTables, cache: WordCache) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize UTF-8 bytes; what the tables cannot vouch for is left to the caller.

    Args:
        text: uint8, shape (n,): UTF-8 bytes of the text.
        tables: the vocabulary as hash tables and the code point table of its tokenizer.
        cache: split words remembered between calls (updated in place; never changes the ids).

    Returns:
        (ids: int32 (m,) with the fast part's ids, spans: int64 (k, 3)): each fallback span's byte
        start and stop in `text` and the position in `ids` where its ids belong.
    """
    if text.dtype != np.uint8 or text.ndim != 1:
        raise TypeError(f"text must be 1-D uint8, got {text.dtype} with shape {text.shape}")
    cps = tables.code_points
    out = np.empty(text.shape[0] * tables.ids_per_byte + 1, dtype=np.int32)
    spans = np.empty((text.shape[0] // 2 + 1, 3), dtype=np.int64)
    w, c = tables.words, tables.continuations
    n_out, n_spans = _encode_kernel(
        np.ascontiguousarray(text), tables.ascii_letters, cps.kinds, cps.starts, cps.lengths, cps.letters,
        cps.isolated_ids, tables.unk_id, tables.max_chars, tables.max_key, tables.word_records, w.blob,
        tables.continuation_records, c.blob, cache.keys, cache.words, cache.ids, out, spans,
        MAX_FALLBACK_BYTES)
    return out[:n_out], spans[:n_spans]
