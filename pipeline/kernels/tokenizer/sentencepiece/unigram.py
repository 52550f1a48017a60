"""SentencePiece Unigram: the best segmentation of one pre-token, as `tokenizers` computes it.

`viterbi_ids` is a line-by-line transcription of `Unigram::encode_optimized` and `Unigram::tokenize`
(tokenizers/src/models/unigram/model.rs): candidates at a position are tried from the shortest
piece to the longest, a later candidate wins only with a strictly higher score, a position no
one-character piece covers gets an unknown node scored `min_score - 10`, runs of unknown nodes
(any node whose id is `unk_id`) are fused, and a string that is no piece becomes `<0xNN>` byte
pieces (byte_fallback, when every byte has one) or `unk_id`. Scores are float64 added in the same
order, so ties break the same way.

The vocabulary is a double-array trie of the pieces' bytes (`pipeline.kernels.tokenizer.sentencepiece.trie`): the search
along a position reads one cell per byte and stops where no piece can continue, as the Rust trie
walk does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.utf8 import utf8_width
from pipeline.kernels.tokenizer.sentencepiece.trie import DoubleArray, find_id

UNK_PENALTY = 10.0  # K_UNK_PENALTY in model.rs


class UnigramArrays(NamedTuple):
    """What `encode.encode_kernel` takes of a Unigram model: `UnigramTables.arrays()`."""

    cells: np.ndarray
    scores: np.ndarray
    byte_ids: np.ndarray
    unk_score: np.ndarray  # float64 [min score - UNK_PENALTY]
    unk: np.ndarray  # int64 [unk id or -1, byte fallback]


@dataclass(frozen=True)
class UnigramTables:
    """A Unigram model for the kernel.

    Attributes:
        pieces: a trie of every piece's bytes to its id.
        scores: float64, shape (vocab,): the score of each id, as `tokenizers` holds it.
        byte_ids: int32, shape (256,): the id of `<0xNN>`, -1 where absent.
        unk_id: -1 when the model has none (an unknown character then fails, as in `tokenizers`).
        unk_score: min_score - 10.
        byte_fallback: whether strings that are no piece become byte pieces.
        max_piece: bytes of the longest piece.
    """

    pieces: DoubleArray
    scores: np.ndarray
    byte_ids: np.ndarray
    unk_id: int
    unk_score: float
    byte_fallback: bool
    max_piece: int

    @classmethod
    def build(cls, vocab: list[tuple[str, float]], unk_id: int | None, byte_fallback: bool) -> UnigramTables:
        """`vocab`: (piece, score) in id order, scores exactly as the Rust model holds them."""
        # a repeated piece: the last id wins (dict order), as in token_to_ids
        entries = dict(zip([token.encode("utf-8") for token, _ in vocab], range(len(vocab))))
        entries.pop(b"", None)  # the trie never yields the empty piece
        scores = np.array([score for _, score in vocab] or [0.0], dtype=np.float64)
        byte_ids = np.array([entries.get(f"<0x{b:02X}>".encode(), -1) for b in range(256)], dtype=np.int32)
        min_score = float(scores.min()) if vocab else np.inf
        return cls(pieces=DoubleArray.build(entries), scores=scores, byte_ids=byte_ids,
                   unk_id=-1 if unk_id is None else int(unk_id), unk_score=float(min_score - UNK_PENALTY),
                   byte_fallback=bool(byte_fallback), max_piece=max(map(len, entries), default=1))

    def arrays(self) -> UnigramArrays:
        """The model as the encoder kernel takes it."""
        return UnigramArrays(self.pieces.cells, self.scores, self.byte_ids, np.array([self.unk_score]),
                             np.array([self.unk_id, self.byte_fallback], dtype=np.int64))


@kernel()
def viterbi_ids(word, start, stop, cells, scores, byte_ids, unk_id, unk_score, byte_fallback,
                best_score, best_start, best_id, out, n_out):
    """Append the ids of word[start:stop] (valid UTF-8) to out from n_out; returns the new n_out, or
    -1 where `tokenizers` fails (an unknown character and no unk_id). best_*: scratch, >= stop-start+1."""
    size = stop - start
    for k in range(size + 1):
        best_score[k] = 0.0
        best_start[k] = -1
        best_id[k] = 0
    s = 0
    while s < size:
        till = best_score[s]
        width = utf8_width(word[start + s])
        single = False
        node = 0
        e = s
        while e < size:  # the pieces that start at s, shortest first (common_prefix_search)
            t = cells[node, 0] + word[start + e]
            if cells[t, 1] != node:
                break  # no piece starts with these bytes
            node = t
            e += 1
            found = cells[node, 2]  # only ever >= 0 at the end of a character: pieces are valid UTF-8
            if found >= 0:
                candidate = scores[found] + till
                if best_start[e] < 0 or candidate > best_score[e]:
                    best_score[e] = candidate
                    best_start[e] = s
                    best_id[e] = found
                if e - s == width:
                    single = True
        if not single:
            if unk_id < 0:
                return -1
            e = s + width
            candidate = unk_score + till
            if best_start[e] < 0 or candidate > best_score[e]:
                best_score[e] = candidate
                best_start[e] = s
                best_id[e] = unk_id
        s += width
    # Walk back, then emit forwards; the walk's node ends are kept in best_score's slot as positions.
    count = 0
    e = size
    while e > 0:
        best_score[count] = e  # reuse: end of the count-th node from the back (scores are no longer needed)
        count += 1
        e = best_start[e]
    k = count - 1
    begin = 0
    while k >= 0:
        end = np.int64(best_score[k])
        node = best_id[end]
        if node != unk_id:
            out[n_out] = node
            n_out += 1
            begin = end
            k -= 1
            continue
        # a run of unknown nodes (fuse_unk is always on in `tokenizers`' Unigram): one string
        while k - 1 >= 0 and best_id[np.int64(best_score[k - 1])] == unk_id:
            k -= 1
        end = np.int64(best_score[k])
        found = find_id(word, start + begin, start + end, cells)
        if found >= 0:
            out[n_out] = found
            n_out += 1
        else:
            bytes_ok = byte_fallback
            if bytes_ok:
                for j in range(begin, end):
                    if byte_ids[word[start + j]] < 0:
                        bytes_ok = False
                        break
            if bytes_ok:
                for j in range(begin, end):
                    out[n_out] = byte_ids[word[start + j]]
                    n_out += 1
            else:
                out[n_out] = unk_id
                n_out += 1
        begin = end
        k -= 1
    return n_out
