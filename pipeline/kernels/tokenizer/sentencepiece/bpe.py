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
from typing import NamedTuple

import numpy as np

from pipeline.kernels.common.hash_table import ByteTable, find, int_get, int_table
from pipeline.kernels.common.jit import helper, kernel
from pipeline.kernels.common.utf8 import BMP, decode_valid

UNK_DROP, UNK_ID, UNK_ERROR = 0, 1, 2  # no unk_token / unk_token in the vocabulary / unk_token missing
_NO_MERGE = np.int32(0x7FFFFFFF)


@helper
def _wide_char_id(word, j, width, blob, starts, lengths, ids, slots):
    """The id of the one character word[j:j+width] beyond the BMP when it is a piece, else -1."""
    return np.int32(find(word, j, j + width, blob, starts, lengths, ids, slots))


class BpeArrays(NamedTuple):
    """What the encoder kernels (`encode.encode_kernel`, `bpe_stream.stream_encode`) take of a BPE
    model: `BpeTables.arrays()`."""

    blob: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    slots: np.ndarray
    pair_table: np.ndarray
    byte_ids: np.ndarray
    flags: np.ndarray  # int64 [byte fallback mode (0, 1, or 2 when bytes_isolated), fuse_unk, ignore_merges,
    #                          unk_mode, unk_id]
    char_ids: np.ndarray
    merge_table: np.ndarray


@dataclass(frozen=True)
class BpeTables:
    """A BPE model with byte fallback for the kernel.

    Attributes:
        vocab: byte strings of the pieces.
        pair_table: `int_table` of first code point << 21 | second of every two adjacent characters
            inside a piece: a cut between two characters that form no such pair, both pieces
            themselves, is one no merge crosses.
        byte_ids: int32, shape (256,): the id of `<0xNN>`, -1 where absent.
        unk_mode, unk_id: UNK_DROP, UNK_ID (with its id) or UNK_ERROR.
        bytes_isolated: byte_fallback, and no merge takes a `<0xNN>` piece: a character that becomes
            byte pieces then ends the merges on both sides of it.
        char_ids: int32, shape (BMP,): the id of each BMP code point that is a piece alone, else -1.
        merge_table: `int_table` from each merge's key (left id << 32 | right id) to rank << 32 |
            resulting id: a merge is found in one place in memory.
    """

    vocab: ByteTable
    pair_table: np.ndarray
    byte_ids: np.ndarray
    byte_fallback: bool
    fuse_unk: bool
    ignore_merges: bool
    unk_mode: int
    unk_id: int
    bytes_isolated: bool
    char_ids: np.ndarray
    merge_table: np.ndarray

    @classmethod
    def build(cls, vocab: dict[str, int], merges: list[tuple[str, str]], unk_token: str | None,
              byte_fallback: bool, fuse_unk: bool, ignore_merges: bool) -> BpeTables:
        table: dict[int, tuple[int, int]] = {}
        for rank, (left, right) in enumerate(merges):  # a repeated merge: the last rank wins, as in the Rust map
            table[(vocab[left] << 32) | vocab[right]] = (rank, vocab[left + right])
        pairs = sorted({(ord(a) << 21) | ord(b) for token in vocab for a, b in zip(token, token[1:])})
        unk_mode = UNK_DROP if unk_token is None else (UNK_ID if unk_token in vocab else UNK_ERROR)
        byte_pieces = {vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab}
        merged = {part for key in table for part in (key >> 32, key & 0xFFFFFFFF)}
        char_ids = np.full(BMP, -1, dtype=np.int32)
        for token, token_id in vocab.items():
            if len(token) == 1 and ord(token) < BMP:
                char_ids[ord(token)] = token_id
        merge_table = int_table(np.array(list(table), dtype=np.int64),
                                np.array([(rank << 32) | new for rank, new in table.values()], dtype=np.int64))
        return cls(vocab=ByteTable.build({k.encode("utf-8"): v for k, v in vocab.items()}),
                   pair_table=int_table(np.array(pairs, dtype=np.int64)),
                   byte_ids=np.array([vocab.get(f"<0x{b:02X}>", -1) for b in range(256)], dtype=np.int32),
                   byte_fallback=bool(byte_fallback), fuse_unk=bool(fuse_unk), ignore_merges=bool(ignore_merges),
                   unk_mode=unk_mode, unk_id=vocab.get(unk_token, -1) if unk_token is not None else -1,
                   bytes_isolated=bool(byte_fallback) and not (byte_pieces & merged), char_ids=char_ids,
                   merge_table=merge_table)

    def arrays(self) -> BpeArrays:
        """The model as the encoder kernels take it."""
        v = self.vocab
        mode = 2 if self.bytes_isolated else int(self.byte_fallback)
        flags = np.array([mode, self.fuse_unk, self.ignore_merges, self.unk_mode, self.unk_id], dtype=np.int64)
        return BpeArrays(v.blob, v.starts, v.lengths, v.ids, v.slots, self.pair_table, self.byte_ids, flags,
                         self.char_ids, self.merge_table)


@helper
def _pair_rank(symbols, k, cap, merge_table):
    """Rank (symbols[cap + k], _NO_MERGE when none) and result (symbols[2cap + k]) of merging symbols k, k+1."""
    found = int_get((np.int64(symbols[k]) << 32) | np.int64(symbols[k + 1]), merge_table)
    if found >= 0:
        symbols[cap + k] = np.int32(found >> 32)
        symbols[2 * cap + k] = np.int32(found & 0xFFFFFFFF)
    else:
        symbols[cap + k] = _NO_MERGE


@helper
def _merge_part(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, byte_ids, byte_fallback,
                fuse_unk, unk_mode, unk_id, symbols, out, n_out):
    """merge_word on word[start:stop]; appends ids to out; -1 where tokenizers fails."""
    n = 0
    pending = -1  # bytes of the pending unknown piece, -1 when none
    j = start
    while j < stop:
        cp, width = decode_valid(word, j)
        found = char_ids[cp] if width < 4 else _wide_char_id(word, j, width, blob, starts, lengths, ids, slots)
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
def bpe_parts(word, start, stop, blob, starts, lengths, ids, slots, char_ids, pair_table, byte_ids,
              byte_fallback, parts):
    """Cut the pre-token word[start:stop] where no merge can cross; each part's (start, stop) into
    parts (int64, (>= stop - start, 2)); returns their number. A cut falls between two characters
    that are pieces and form no pair inside any piece (`BpeTables.pair_table`), and, where byte_fallback
    is 2 (`BpeTables.bytes_isolated`), on both sides of a character that becomes byte pieces, unless
    an unknown piece is pending (it is written after such byte pieces, before the next known
    character)."""
    count = 0
    part = start
    j = start
    previous = np.int64(-1)  # code point before j when it is a piece by itself, else -1
    clean = True  # no character of the current part is unknown (neither a piece nor byte pieces)
    while j < stop:
        cp, width = decode_valid(word, j)
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
        if previous >= 0 and alone and int_get((previous << 21) | cp, pair_table) < 0:
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
def bpe_ids(word, start, stop, blob, starts, lengths, ids, slots, char_ids, merge_table, pair_table,
            byte_ids, byte_fallback, fuse_unk, ignore_merges, unk_mode, unk_id, symbols, parts, out, n_out):
    """Append the ids of the pre-token word[start:stop] (valid UTF-8) to out from n_out; returns the
    new n_out, or -1 where `tokenizers` fails. symbols: int32 scratch, >= 3 * (stop - start); parts:
    int64 scratch, (>= stop - start, 2)."""
    if start == stop:
        return n_out
    if ignore_merges:
        whole = find(word, start, stop, blob, starts, lengths, ids, slots)
        if whole >= 0:
            out[n_out] = whole
            n_out += 1
            return n_out
    count = bpe_parts(word, start, stop, blob, starts, lengths, ids, slots, char_ids, pair_table, byte_ids,
                      byte_fallback, parts)
    for k in range(count):
        n_out = _merge_part(word, parts[k, 0], parts[k, 1], blob, starts, lengths, ids, slots, char_ids, merge_table,
                            byte_ids, byte_fallback, fuse_unk, unk_mode, unk_id, symbols, out, n_out)
        if n_out < 0:
            return -1
    return n_out
