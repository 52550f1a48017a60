"""The byte-level BPE kernel's tables built in linear passes over arrays, not Python loops a token.

A vocabulary of 250,000 tokens and 500,000 merges (Qwen3.6) took seconds of Python a process: a
dictionary lookup, a string split and an encode a merge, the real model asked about every short
token. Here the vocabulary is one byte blob (`hash_table.ByteTable` arrays, built by the adapter
from the tokens' code points with numpy), and:

- `merge_ids`: each merge's two parts and its result looked up in the vocabulary keyed by the
  tokens' UTF-8 (the result is the first part's bytes then the second's less the continuing prefix,
  as `tokenizers` names it);
- `one_token_words`: every word of up to 16 bytes that the kernel's own BPE (`encode._bpe`, or the
  whole-word lookup under `ignore_merges`) makes one token, packed as `word_cache.word_key` packs
  a word (the word table's seeds, `word_table.seed_words`). The table of such words is then a memo
  of what the kernel computes for them: it changes the speed, never the ids.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.hash_table import hash_bytes, lookup
from pipeline.kernels.common.jit import kernel
from pipeline.kernels.tokenizer.bytelevel.encode import MAX_KERNEL_WORD, _bpe

NO_SPACE = -2  # `merge_parts`: a merge string without exactly one space (tokenizers refuses the file)


@kernel()
def merge_parts(blob, starts, stops):
    """int64 (n, 4): (a start, a stop, b start, b stop) of each `"a b"` merge string blob[starts[i]:stops[i]]
    (UTF-8), split at its one space; a row of NO_SPACE where a string has none or several."""
    n = starts.shape[0]
    parts = np.empty((n, 4), dtype=np.int64)
    for i in range(n):
        space = np.int64(-1)
        count = 0
        for k in range(starts[i], stops[i]):
            if blob[k] == 32:
                space = k
                count += 1
        if count != 1:
            parts[i, :] = NO_SPACE
            continue
        parts[i, 0] = starts[i]
        parts[i, 1] = space
        parts[i, 2] = space + 1
        parts[i, 3] = stops[i]
    return parts


@kernel()
def merge_ids(blob, parts, skip, v_blob, v_starts, v_lengths, v_ids, v_slots):
    """int64 (n, 3): the ids of each merge's first part, second part and result (-1: not in the
    vocabulary). parts[i] = (a start, a stop, b start, b stop) in `blob` (UTF-8); the result is
    a's bytes then b's less its first `skip` bytes (the continuing-subword prefix). The vocabulary
    (v_*) is keyed by the tokens' UTF-8."""
    n = parts.shape[0]
    ids = np.full((n, 3), -1, dtype=np.int64)
    longest = 1
    for i in range(n):
        longest = max(longest, parts[i, 1] - parts[i, 0] + parts[i, 3] - parts[i, 2])
    joined = np.empty(longest, dtype=np.uint8)
    for i in range(n):
        a0, a1, b0, b1 = parts[i, 0], parts[i, 1], parts[i, 2], parts[i, 3]
        if a0 < 0:
            continue
        ids[i, 0] = lookup(hash_bytes(blob, a0, a1), blob, a0, a1, v_blob, v_starts, v_lengths, v_ids, v_slots)
        ids[i, 1] = lookup(hash_bytes(blob, b0, b1), blob, b0, b1, v_blob, v_starts, v_lengths, v_ids, v_slots)
        size = 0
        for k in range(a0, a1):
            joined[size] = blob[k]
            size += 1
        for k in range(min(b0 + skip, b1), b1):
            joined[size] = blob[k]
            size += 1
        ids[i, 2] = lookup(hash_bytes(joined, 0, size), joined, 0, size, v_blob, v_starts, v_lengths, v_ids,
                           v_slots)
    return ids


@kernel()
def one_token_words(words, starts, lengths, ignore_merges, initial, merges, byte_pairs, v_blob, v_starts, v_lengths,
                    v_ids, v_slots):
    """(k0 uint64, k1 uint64, lengths int64, ids int64) of the words words[starts[i]:starts[i] + lengths[i]]
    (raw bytes, 1 to 16 each) that the kernel makes one token: under `ignore_merges` a word that is
    a vocabulary entry (v_*, keyed by raw bytes) is that entry, else BPE (`encode._bpe`) decides;
    a word with a byte without an initial id is never one (the real model decides it). k0 and k1
    are bytes 0-7 and 8-15 packed little-endian (zero past the word), as `word_cache.word_key` packs them."""
    n = starts.shape[0]
    k0s = np.empty(n, dtype=np.uint64)
    k1s = np.empty(n, dtype=np.uint64)
    sizes = np.empty(n, dtype=np.int64)
    found = np.empty(n, dtype=np.int64)
    symbols = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    ranks = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    news = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    out = np.empty(MAX_KERNEL_WORD + 1, dtype=np.int32)
    count = 0
    for i in range(n):
        start = starts[i]
        stop = start + lengths[i]
        token = np.int64(-1)
        if ignore_merges:
            token = lookup(hash_bytes(words, start, stop), words, start, stop, v_blob, v_starts, v_lengths, v_ids,
                           v_slots)
        if token < 0:
            made = _bpe(words, start, stop, initial, merges, byte_pairs, symbols, ranks, news, out, 0)
            if made == 1:
                token = out[0]
        if token < 0:
            continue
        k0 = np.uint64(0)
        k1 = np.uint64(0)
        for q in range(lengths[i]):
            byte = np.uint64(words[start + q]) << np.uint64(8 * (q & 7))
            if q < 8:
                k0 |= byte
            else:
                k1 |= byte
        k0s[count] = k0
        k1s[count] = k1
        sizes[count] = lengths[i]
        found[count] = token
        count += 1
    return k0s[:count], k1s[:count], sizes[:count], found[:count]
