"""SentencePiece-style BPE (Llama / Gemma): characters, `<0xNN>` byte pieces for unknown ones, then
merges by rank, as `tokenizers` computes them for one pre-token.

`bpe_ids` transcribes `BPE::merge_word` and `Word::merge_all` (tokenizers/src/models/bpe/): each
character is its vocabulary piece, else (byte_fallback) one `<0xNN>` piece per UTF-8 byte when all
exist, else the unknown piece (consecutive ones fused when fuse_unk; with unk_token unset the
character is dropped). A pending unknown piece is only written before the next known character or
at the end, so byte pieces met in between come before it, as in the Rust code. Merges then apply
lowest rank first, leftmost first among equal ranks (the Rust heap's order; its stale-entry check
accepts exactly the pairs still present, since a merge's result spells the two pieces it joins).

A long pre-token (the whole text for a tokenizer without a pre-tokenizer) is cut first where no
vocabulary piece can span the cut (see `splittable`): merges never cross such a cut, so each part
gives the ids it gets inside the whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hash_table import ByteTable
from pipeline.kernels.common.hashing import FNV_OFFSET, FNV_PRIME
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.tokenizer.sentencepiece.unigram import utf8_width

# private helpers, called from kernels only: no CPython wrapper to compile (calling one from Python crashes)
_inner = kernel(no_cpython_wrapper=True, no_cfunc_wrapper=True)

UNK_DROP, UNK_ID, UNK_ERROR = 0, 1, 2  # no unk_token / unk_token in the vocabulary / unk_token missing
_FNV_OFFSET = FNV_OFFSET
_FNV_PRIME = FNV_PRIME
_EMPTY = np.int64(-1)
_BMP = 0x10000
_NO_MERGE = np.int32(0x7FFFFFFF)


def _int_table(keys: np.ndarray) -> np.ndarray:
    """Open-addressing slots (index + 1, 0 empty) for int64 keys."""
    size = 1 << max(4, int(2 * max(len(keys), 1) - 1).bit_length())
    slots = np.zeros(size, dtype=np.int32)
    _fill_int_slots(keys, slots)
    return slots


@_inner
def _mix(key):
    z = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return z ^ (z >> np.uint64(29))


@kernel()
def _fill_int_slots(keys, slots):
    mask = slots.shape[0] - 1
    for i in range(keys.shape[0]):
        slot = np.int64(_mix(keys[i]) & np.uint64(mask))
        while slots[slot] != 0:
            slot = (slot + 1) & mask
        slots[slot] = i + 1


@kernel()
def int_lookup(key, keys, slots):
    """Index of `key` in `keys` through `slots`, or -1."""
    mask = slots.shape[0] - 1
    slot = np.int64(_mix(key) & np.uint64(mask))
    while slots[slot] != 0:
        entry = slots[slot] - 1
        if keys[entry] == key:
            return entry
        slot = (slot + 1) & mask
    return -1


@kernel()
def _fill_merge_table(keys, ranks, new, table):
    mask = table.shape[0] - 1
    for i in range(keys.shape[0]):
        if keys[i] < 0:
            continue
        slot = np.int64(_mix(keys[i]) & np.uint64(mask))
        while table[slot, 0] != -1:
            slot = (slot + 1) & mask
        table[slot, 0] = keys[i]
        table[slot, 1] = (ranks[i] << 32) | new[i]


@_inner
def _merge_of(key, table):
    """rank << 32 | resulting id of the merge `key` (left id << 32 | right id), or -1."""
    mask = table.shape[0] - 1
    slot = np.int64(_mix(key) & np.uint64(mask))
    while True:
        found = table[slot, 0]
        if found == key:
            return table[slot, 1]
        if found == -1:
            return np.int64(-1)
        slot = (slot + 1) & mask


@_inner
def _wide_char_id(word, j, width, blob, starts, lengths, ids, slots):
    """The id of the one character word[j:j+width] beyond the BMP when it is a piece, else -1."""
    return np.int32(_piece_id(word, j, j + width, blob, starts, lengths, ids, slots))


@dataclass(frozen=True)
class BpeTables:
    """A BPE model with byte fallback for the kernel.

    Attributes:
        vocab: byte strings of the pieces.
        merge_keys: int64: left id << 32 | right id of each merge; merge_slots its hash slots.
        merge_rank, merge_new: int32: rank and resulting id of each merge.
        pair_keys: int64: first code point << 21 | second of every two adjacent characters inside a
            piece (pair_slots its hash slots): a cut between two characters that form no such pair,
            both pieces themselves, is one no merge crosses.
        byte_ids: int32, shape (256,): the id of `<0xNN>`, -1 where absent.
        unk_mode, unk_id: UNK_DROP, UNK_ID (with its id) or UNK_ERROR.
        bytes_isolated: byte_fallback, and no merge takes a `<0xNN>` piece: a character that becomes
            byte pieces then ends the merges on both sides of it.
        char_ids: int32, shape (65536,): the id of each BMP code point that is a piece alone, else -1.
        merge_table: int64, shape (power of two, 2): open addressing, each slot (merge key or -1,
            rank << 32 | resulting id): a merge is found in one place in memory.
    """

    vocab: ByteTable
    merge_keys: np.ndarray
    merge_slots: np.ndarray
    merge_rank: np.ndarray
    merge_new: np.ndarray
    pair_keys: np.ndarray
    pair_slots: np.ndarray
    byte_ids: np.ndarray
    byte_fallback: bool
    fuse_unk: bool
    ignore_merges: bool
    unk_mode: int
    unk_id: int
    bytes_isolated: bool = False
    char_ids: np.ndarray = None
    merge_table: np.ndarray = None

    @classmethod
    def build(cls, vocab: dict[str, int], merges: list[tuple[str, str]], unk_token: str | None,
              byte_fallback: bool, fuse_unk: bool, ignore_merges: bool) -> BpeTables:
        table: dict[int, tuple[int, int]] = {}
        for rank, (left, right) in enumerate(merges):  # a repeated merge: the last rank wins, as in the Rust map
            table[(vocab[left] << 32) | vocab[right]] = (rank, vocab[left + right])
        keys = list(table)
        ranks = [table[k][0] for k in keys]
        new = [table[k][1] for k in keys]
        pairs = sorted({(ord(a) << 21) | ord(b) for token in vocab for a, b in zip(token, token[1:])})
        merge_keys = np.array(keys or [-1], dtype=np.int64)
        pair_keys = np.array(pairs or [-1], dtype=np.int64)
        unk_mode = UNK_DROP if unk_token is None else (UNK_ID if unk_token in vocab else UNK_ERROR)
        byte_pieces = {vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab}
        merged = {part for key in table for part in (key >> 32, key & 0xFFFFFFFF)}
        char_ids = np.full(_BMP, -1, dtype=np.int32)
        for token, token_id in vocab.items():
            if len(token) == 1 and ord(token) < _BMP:
                char_ids[ord(token)] = token_id
        merge_table = np.full((int(_int_table(merge_keys).shape[0]), 2), -1, dtype=np.int64)
        _fill_merge_table(merge_keys, np.array(ranks or [0], dtype=np.int64), np.array(new or [0], dtype=np.int64),
                          merge_table)
        return cls(vocab=ByteTable.build({k.encode("utf-8"): v for k, v in vocab.items()}),
                   merge_keys=merge_keys, merge_slots=_int_table(merge_keys),
                   merge_rank=np.array(ranks or [0], dtype=np.int32), merge_new=np.array(new or [0], dtype=np.int32),
                   pair_keys=pair_keys, pair_slots=_int_table(pair_keys),
                   byte_ids=np.array([vocab.get(f"<0x{b:02X}>", -1) for b in range(256)], dtype=np.int32),
                   byte_fallback=bool(byte_fallback), fuse_unk=bool(fuse_unk), ignore_merges=bool(ignore_merges),
                   unk_mode=unk_mode, unk_id=vocab.get(unk_token, -1) if unk_token is not None else -1,
                   bytes_isolated=bool(byte_fallback) and not (byte_pieces & merged), char_ids=char_ids,
                   merge_table=merge_table)


@kernel()
def find(h, word, start, stop, blob, starts, lengths, ids, slots):
    """The id of word[start:stop] whose FNV hash is h, or -1 (wordpiece's lookup, inlined)."""
    mask = slots.shape[0] - 1
    slot = np.int64(h & np.uint64(mask))
    n = stop - start
    while slots[slot] != 0:
        entry = slots[slot] - 1
        if lengths[entry] == n:
            base = starts[entry]
            same = True
            for k in range(n):
                if blob[base + k] != word[start + k]:
                    same = False
                    break
            if same:
                return ids[entry]
        slot = (slot + 1) & mask
    return -1


@_inner
def _piece_id(word, a, b, blob, starts, lengths, ids, slots):
    h = _FNV_OFFSET
    for j in range(a, b):
        h = (h ^ np.uint64(word[j])) * _FNV_PRIME
    return find(h, word, a, b, blob, starts, lengths, ids, slots)


@_inner
def _code_point(word, j, width):
    if width == 1:
        return np.int64(word[j])
    if width == 2:
        return ((np.int64(word[j]) & 0x1F) << 6) | (np.int64(word[j + 1]) & 0x3F)
    if width == 3:
        return (((np.int64(word[j]) & 0x0F) << 12) | ((np.int64(word[j + 1]) & 0x3F) << 6)
                | (np.int64(word[j + 2]) & 0x3F))
    return (((np.int64(word[j]) & 0x07) << 18) | ((np.int64(word[j + 1]) & 0x3F) << 12)
            | ((np.int64(word[j + 2]) & 0x3F) << 6) | (np.int64(word[j + 3]) & 0x3F))


@_inner
def _pair_rank(symbols, k, cap, merge_table):
    """Rank (symbols[cap + k], _NO_MERGE when none) and result (symbols[2cap + k]) of merging symbols k, k+1."""
    found = _merge_of((np.int64(symbols[k]) << 32) | np.int64(symbols[k + 1]), merge_table)
    if found >= 0:
        symbols[cap + k] = np.int32(found >> 32)
        symbols[2 * cap + k] = np.int32(found & 0xFFFFFFFF)
    else:
        symbols[cap + k] = _NO_MERGE


@_inner
def _merge_part(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, byte_ids, byte_fallback,
                fuse_unk, unk_mode, unk_id, symbols, out, n_out):
    """merge_word on word[start:stop]; appends ids to out; -1 where tokenizers fails."""
    n = 0
    pending = -1  # bytes of the pending unknown piece, -1 when none
    j = start
    while j < stop:
        width = utf8_width(word[j])
        found = char_ids[_code_point(word, j, width)] if width < 4 else _wide_char_id(word, j, width, blob, starts,
                                                                                        lengths, ids, slots)
        if found >= 0:
            if pending >= 0:
                symbols[n] = unk_id
                n += 1
                pending = -1
            symbols[n] = found
            n += 1
        else:
            done = False
            if byte_fallback:
                done = True
                for k in range(j, j + width):
                    if byte_ids[word[k]] < 0:
                        done = False
                        break
                if done:
                    for k in range(j, j + width):
                        symbols[n] = byte_ids[word[k]]
                        n += 1
            if not done:
                if unk_mode == UNK_ERROR:
                    return -1
                if unk_mode == UNK_ID:
                    if pending >= 0 and fuse_unk:
                        pending += width
                    elif pending >= 0:
                        symbols[n] = unk_id
                        n += 1
                        pending = width
                    else:
                        pending = width
        j += width
    if pending >= 0:
        symbols[n] = unk_id
        n += 1
    # lowest rank first, leftmost among equals: each pair's rank looked up once, then again only
    # for the two pairs a merge changes (symbols[cap:2cap] ranks, [2cap:3cap] the merged ids)
    cap = stop - start
    for k in range(n - 1):
        _pair_rank(symbols, k, cap, merge_table)
    while n > 1:
        best = np.int64(-1)
        best_rank = _NO_MERGE
        for k in range(n - 1):
            if symbols[cap + k] < best_rank:
                best_rank = symbols[cap + k]
                best = k
        if best < 0:
            break
        symbols[best] = symbols[2 * cap + best]
        for k in range(best + 1, n - 1):
            symbols[k] = symbols[k + 1]
        for k in range(best + 1, n - 2):
            symbols[cap + k] = symbols[cap + k + 1]
            symbols[2 * cap + k] = symbols[2 * cap + k + 1]
        n -= 1
        if best > 0:
            _pair_rank(symbols, best - 1, cap, merge_table)
        if best < n - 1:
            _pair_rank(symbols, best, cap, merge_table)
    for k in range(n):
        out[n_out] = symbols[k]
        n_out += 1
    return n_out


@kernel()
def bpe_parts(word, start, stop, blob, starts, lengths, ids, slots, char_ids, pair_keys, pair_slots, byte_ids,
              byte_fallback, parts):
    """Cut the pre-token word[start:stop] where no merge can cross; each part's (start, stop) into
    parts (int64, (>= stop - start, 2)); returns their number. A cut falls between two characters
    that are pieces and form no pair inside any piece (`BpeTables.pair_keys`), and, where byte_fallback
    is 2 (`BpeTables.bytes_isolated`), on both sides of a character that becomes byte pieces, unless
    an unknown piece is pending (it is written after such byte pieces, before the next known
    character)."""
    count = 0
    part = start
    j = start
    previous = np.int64(-1)  # code point before j when it is a piece by itself, else -1
    clean = True  # no character of the current part is unknown (neither a piece nor byte pieces)
    while j < stop:
        width = utf8_width(word[j])
        cp = _code_point(word, j, width)
        alone = (char_ids[cp] if width < 4 else _wide_char_id(word, j, width, blob, starts, lengths, ids, slots)) >= 0
        if not alone and byte_fallback == 2 and clean:
            as_bytes = True
            for k in range(j, j + width):
                if byte_ids[word[k]] < 0:
                    as_bytes = False
                    break
            if as_bytes:  # byte pieces no merge takes: the merges stop on both sides
                if j > part:
                    parts[count, 0] = part
                    parts[count, 1] = j
                    count += 1
                parts[count, 0] = j
                parts[count, 1] = j + width
                count += 1
                j += width
                part = j
                previous = np.int64(-1)
                continue
        if previous >= 0 and alone and int_lookup((previous << 21) | cp, pair_keys, pair_slots) < 0:
            parts[count, 0] = part
            parts[count, 1] = j
            count += 1
            part = j
            clean = True
        if not alone:
            unknown = byte_fallback == 0
            for k in range(j, j + width):
                if byte_ids[word[k]] < 0:
                    unknown = True
            if unknown:
                clean = False  # its unknown piece waits for the next known character: no cut before that
        previous = cp if alone else np.int64(-1)
        j += width
    if stop > part:
        parts[count, 0] = part
        parts[count, 1] = stop
        count += 1
    return count


@kernel()
def merge_part(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, byte_ids, byte_fallback,
               fuse_unk, unk_mode, unk_id, symbols, out, n_out):
    """The ids of one part (see `bpe_parts`) appended to out from n_out; returns the new n_out, or -1
    where `tokenizers` fails. symbols: int32 scratch, >= 3 * (stop - start)."""
    return _merge_part(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, byte_ids,
                       byte_fallback, fuse_unk, unk_mode, unk_id, symbols, out, n_out)


@kernel()
def bpe_ids(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, pair_keys, pair_slots,
            byte_ids, byte_fallback, fuse_unk, ignore_merges, unk_mode, unk_id, symbols, parts, out, n_out):
    """Append the ids of the pre-token word[start:stop] (valid UTF-8) to out from n_out; returns the
    new n_out, or -1 where `tokenizers` fails. symbols: int32 scratch, >= 3 * (stop - start); parts:
    int64 scratch, (>= stop - start, 2)."""
    if start == stop:
        return n_out
    if ignore_merges:
        whole = _piece_id(word, start, stop, blob, starts, lengths, ids, slots)
        if whole >= 0:
            out[n_out] = whole
            n_out += 1
            return n_out
    count = bpe_parts(word, start, stop, blob, starts, lengths, ids, slots, char_ids, pair_keys, pair_slots, byte_ids,
                      byte_fallback, parts)
    for k in range(count):
        n_out = _merge_part(word, parts[k, 0], parts[k, 1], blob, starts, lengths, ids, slots, char_ids, merge_table,
                            byte_ids, byte_fallback, fuse_unk, unk_mode, unk_id, symbols, out, n_out)
        if n_out < 0:
            return -1
    return n_out
