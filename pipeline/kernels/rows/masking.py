"""The MLM masking kernel: one function for static copies, dynamic epochs and the loader.

Rule (BERT): each non-special position is selected with probability `mlm_probability` (at least
one per row that has any eligible position); a selected position becomes `[MASK]` with probability
`mask_replace_prob`, a random ordinary token with `random_replace_prob`, else stays unchanged.
Labels hold the original id at selected positions and IGNORE_INDEX elsewhere.

Every draw is a counter-based hash of (row mask seed, epoch, position), so the mask of a row is a
pure function of (mask_seed, epoch): static copy k is bit-identical to dynamic epoch k, in any
process, whatever the batch the row arrives in. Selection draws are 16 bits (four per 64-bit
hash), so `mlm_probability` is rounded to a multiple of 2**-16 (0.15 -> 0.149994); the category
draws are 32 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.common.hashing import draw_threshold, mix64
from pipeline.kernels.common.jit import kernel
from schemas.options import MASKING_UNITS, UNIT_SPAN, UNIT_TOKEN, UNIT_WORD
from schemas.shard import IGNORE_INDEX

_EPOCH_SALT = np.uint64(0xE90C4E90C4E90C4E)
_CATEGORY_SALT = np.uint64(0xCA7E6021CA7E6021)
_FORCE_SALT = np.uint64(0xF02CEF02CEF02CE1)
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
LANES = 4  # selection draws per 64-bit hash
DRAW_BITS = 16  # resolution of a selection draw: probabilities are rounded to multiples of 2**-16
_DRAW_MASK = np.uint64((1 << DRAW_BITS) - 1)
_DRAW_SHIFT = np.uint64(DRAW_BITS)

_SPAN_SALT = np.uint64(0x5BA45BA45BA45BA4)
_S11 = np.uint64(11)



@dataclass(frozen=True)
class MaskingRule:
    """What the kernel needs to know about a vocabulary and the ratios.

    Attributes:
        is_special: bool, shape (vocab_size,): True for ids never selected ([CLS], [SEP], [PAD], ...).
        replacement_pool: int32, shape (P,): ids a random replacement is drawn from (ordinary tokens).
        mask_id: the `[MASK]` id.
        mlm_probability, mask_replace_prob, random_replace_prob: the 15/80/10 ratios.
        unit: "token" (BERT), "word" (whole-word: all pieces of a selected word are targets) or
            "span" (SpanBERT: spans of whole words, geometric length in words).
        is_continuation: bool, shape (vocab_size,): True for ids that continue a word (WordPiece
            `##x`; BPE/SentencePiece pieces without the word-start marker). Needed for "word"
            and "span".
        span_p, max_span: the span length in words: Geometric(span_p) truncated to [1, max_span].
    """

    is_special: np.ndarray
    replacement_pool: np.ndarray
    mask_id: int
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    unit: str = UNIT_TOKEN
    is_continuation: np.ndarray | None = None
    span_p: float = 0.2
    max_span: int = 10

    def __post_init__(self) -> None:
        if self.is_special.dtype != np.bool_ or self.is_special.ndim != 1:
            raise TypeError(f"is_special must be a 1-D bool array, got {self.is_special.dtype} {self.is_special.shape}")
        if self.replacement_pool.dtype != np.int32 or self.replacement_pool.size == 0:
            raise TypeError("replacement_pool must be a non-empty int32 array")
        if self.is_special[self.replacement_pool].any():
            raise ValueError("replacement_pool contains special ids")
        if not 0 <= self.mask_id < self.is_special.size:
            raise ValueError(f"mask_id {self.mask_id} outside the vocabulary of {self.is_special.size}")
        check_probabilities(self.mlm_probability, self.mask_replace_prob, self.random_replace_prob)
        if self.unit not in MASKING_UNITS:
            raise ValueError(f"unit must be one of {MASKING_UNITS}, got {self.unit!r}")
        if self.unit in (UNIT_WORD, UNIT_SPAN) and (self.is_continuation is None
                                       or self.is_continuation.shape != self.is_special.shape):
            raise ValueError(f"{self.unit} masking needs is_continuation of shape (vocab_size,)")
        if not 0.0 < self.span_p <= 1.0 or self.max_span < 1:
            raise ValueError(f"span_p must be in (0, 1] and max_span >= 1, got {self.span_p}, {self.max_span}")

    @property
    def vocab_size(self) -> int:
        return int(self.is_special.size)

    @classmethod
    def from_ids(cls, vocab_size: int, never_selected: list[int], never_replacement: list[int], mask_id: int,
                 mlm_probability: float = 0.15, mask_replace_prob: float = 0.8,
                 random_replace_prob: float = 0.1, *, unit: str = UNIT_TOKEN, continuation_ids: list[int] = (),
                 span_p: float = 0.2, max_span: int = 10) -> MaskingRule:
        """A rule from id lists: `never_selected` (special ids) are never targets nor replacements;
        `never_replacement` (e.g. `[unused*]`) are additionally never drawn as random replacements;
        `continuation_ids` continue a word (for unit="word")."""
        is_special = np.zeros(vocab_size, dtype=np.bool_)
        is_special[list(never_selected)] = True
        excluded = is_special.copy()
        excluded[list(never_replacement)] = True
        pool = np.flatnonzero(~excluded).astype(np.int32)
        is_continuation = np.zeros(vocab_size, dtype=np.bool_)
        is_continuation[list(continuation_ids)] = True
        return cls(is_special=is_special, replacement_pool=pool, mask_id=mask_id, mlm_probability=mlm_probability,
                   mask_replace_prob=mask_replace_prob, random_replace_prob=random_replace_prob, unit=unit,
                   is_continuation=is_continuation, span_p=span_p, max_span=max_span)


def check_probabilities(mlm_probability: float, mask_replace_prob: float, random_replace_prob: float) -> None:
    """Raise ValueError unless all three lie in [0, 1] and the two replacement shares sum to <= 1."""
    for name, value in (
        ("mlm_probability", mlm_probability),
        ("mask_replace_prob", mask_replace_prob),
        ("random_replace_prob", random_replace_prob),
    ):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if mask_replace_prob + random_replace_prob > 1.0 + 1e-12:
        raise ValueError(
            f"mask_replace_prob + random_replace_prob must be <= 1, got "
            f"{mask_replace_prob} + {random_replace_prob} = {mask_replace_prob + random_replace_prob}"
        )


@kernel()
def _row_streams(seed, epoch_key):
    """The two hash streams of a row at an epoch: selection draws, and category draws."""
    stream = mix64(seed ^ epoch_key)
    return stream, stream ^ _CATEGORY_SALT


@kernel()
def _draw_category(category_stream, j, mask_thr, random_thr, pool_size):
    """The 80/10/10 draw of target position j: (1 [MASK], 2 random ordinary token, 3 unchanged;
    the index of the random token in the pool). The one copy of the rule every masking unit uses,
    so all of them stay bit-identical to each other. Scalars only: a helper taking the row arrays
    cost the token kernel two thirds of its speed (numba reference-counts array arguments)."""
    h = mix64(category_stream + np.uint64(j))
    u = h >> _S32  # top 32 bits decide the category, the low 32 bits pick the random token
    if u < mask_thr:
        return 1, 0
    if u < random_thr:
        return 2, np.int64(((h & _LOW32) * pool_size) >> _S32)
    return 3, 0


@kernel()
def _forced_pick(stream, n_choices):
    """Which of n_choices (eligible positions or words) becomes the one target of a row whose
    draws selected nothing."""
    return mix64(stream ^ _FORCE_SALT) % np.uint64(n_choices)


@kernel()
def _mask_rows_kernel(ids, seeds, epoch_key, is_special, pool, mask_id, select_thr, mask_thr, random_thr,
                      out_ids, out_labels, counts):
    n_rows, seq_len = ids.shape
    n_blocks = seq_len // LANES
    pool_size = np.uint64(pool.shape[0])
    n_total = 0
    n_masked = 0
    n_random = 0
    candidates = np.empty(seq_len + 1, dtype=np.int64)
    for row in range(n_rows):
        row_in, row_ids, row_labels = ids[row], out_ids[row], out_labels[row]
        stream, category_stream = _row_streams(seeds[row], epoch_key)
        # One 64-bit hash gives the selection draws of LANES positions (DRAW_BITS each). Candidates
        # are collected without branches, then the few (~15%) are checked and applied.
        n_candidates = 0
        for block in range(n_blocks):
            h = mix64(stream + np.uint64(block))
            base = block * LANES
            for lane in range(LANES):
                candidates[n_candidates] = base + lane
                n_candidates += (h & _DRAW_MASK) < select_thr
                h >>= _DRAW_SHIFT
        h = mix64(stream + np.uint64(n_blocks))
        for j in range(n_blocks * LANES, seq_len):
            candidates[n_candidates] = j
            n_candidates += (h & _DRAW_MASK) < select_thr
            h >>= _DRAW_SHIFT
        n_selected = 0
        for attempt in range(2):
            for c in range(n_candidates):
                j = candidates[c]
                t = row_in[j]
                if is_special[t]:
                    continue
                n_selected += 1
                row_labels[j] = t
                category, pick = _draw_category(category_stream, j, mask_thr, random_thr, pool_size)
                if category == 1:
                    row_ids[j] = mask_id
                    n_masked += 1
                elif category == 2:
                    row_ids[j] = pool[pick]
                    n_random += 1
            if n_selected or attempt:
                break
            # No target: take the k-th eligible position instead (at least one target per row).
            n_eligible = 0
            for j in range(seq_len):
                n_eligible += not is_special[row_in[j]]
            if n_eligible == 0:
                break
            k = _forced_pick(stream, n_eligible)
            for j in range(seq_len):
                if not is_special[row_in[j]]:
                    if k == 0:
                        candidates[0] = j
                        n_candidates = 1
                        break
                    k -= np.uint64(1)
        n_total += n_selected
    counts[0] += n_total
    counts[1] += n_masked
    counts[2] += n_random
    counts[3] += n_total - n_masked - n_random


@kernel()
def _word_end(row_in, j, is_special, is_continuation):
    end = j + 1
    while end < row_in.shape[0] and not is_special[row_in[end]] and is_continuation[row_in[end]]:
        end += 1
    return end


@kernel()
def _mask_words_kernel(ids, seeds, epoch_key, is_special, is_continuation, pool, mask_id, word_thr, mask_thr,
                       random_thr, out_ids, out_labels, counts):
    """Whole words: a word starts at a non-special id that is not a continuation (or right after a
    special) and runs over its continuation pieces; each word is selected with probability p, all
    its pieces become targets, and the 80/10/10 rule applies per piece."""
    n_rows, seq_len = ids.shape
    pool_size = np.uint64(pool.shape[0])
    for row in range(n_rows):
        row_in, row_ids, row_labels = ids[row], out_ids[row], out_labels[row]
        stream, category_stream = _row_streams(seeds[row], epoch_key)
        n_selected = 0
        n_words = 0
        j = 0
        while j < seq_len:
            if is_special[row_in[j]]:
                j += 1
                continue
            end = _word_end(row_in, j, is_special, is_continuation)
            n_words += 1
            if (mix64(stream + np.uint64(j)) >> _S32) < word_thr:
                for k in range(j, end):
                    row_labels[k] = row_in[k]
                    category, pick = _draw_category(category_stream, k, mask_thr, random_thr, pool_size)
                    row_ids[k] = mask_id if category == 1 else pool[pick] if category == 2 else row_in[k]
                    counts[category] += 1
                n_selected += end - j
            j = end
        if n_selected == 0 and n_words > 0:
            pick = _forced_pick(stream, n_words)
            j = 0
            seen = np.uint64(0)
            while j < seq_len:
                if is_special[row_in[j]]:
                    j += 1
                    continue
                end = _word_end(row_in, j, is_special, is_continuation)
                if seen == pick:
                    for k in range(j, end):
                        row_labels[k] = row_in[k]
                        category, chosen = _draw_category(category_stream, k, mask_thr, random_thr, pool_size)
                        row_ids[k] = mask_id if category == 1 else pool[chosen] if category == 2 else row_in[k]
                        counts[category] += 1
                    n_selected += end - j
                    break
                seen += np.uint64(1)
                j = end
        counts[0] += n_selected


@kernel()
def _span_words(u, q, q_max):
    """A span length in words from Geometric(1 - q) truncated to [1, max_span] (renormalised, as
    SpanBERT does): the inverse CDF at u in (0, 1), where q_max = q ** max_span."""
    if q <= 0.0:
        return 1
    return max(1, int(np.ceil(np.log(1.0 - u * (1.0 - q_max)) / np.log(q) - 1e-12)))


@kernel()
def _mask_spans_kernel(ids, seeds, epoch_key, is_special, is_continuation, pool, mask_id, p, span_p, max_span,
                       mask_thr, random_thr, out_ids, out_labels, counts, span_lengths):
    """SpanBERT: spans of whole words, their length in words drawn from Geometric(span_p) truncated
    to [1, max_span]; an anchor token drawn uniformly among the eligible ones is moved to the start
    of its word, and the span covers that word and the following ones until its length, a special
    token or an earlier target. Spans are added until the row's budget of targets is reached; the
    budget is p * eligible rounded up or down at random (so its mean is exactly p * eligible, at
    least one), and as in SpanBERT the span that reaches it stops there. span_lengths[k] counts the
    placed spans whose drawn length was k words."""
    n_rows, seq_len = ids.shape
    pool_size = np.uint64(pool.shape[0])
    eligible = np.empty(seq_len, dtype=np.int64)
    q = 1.0 - span_p
    q_max = q ** max_span
    for row in range(n_rows):
        row_in, row_ids, row_labels = ids[row], out_ids[row], out_labels[row]
        stream, category_stream = _row_streams(seeds[row], epoch_key)
        n_eligible = 0
        for j in range(seq_len):
            if not is_special[row_in[j]]:
                eligible[n_eligible] = j
                n_eligible += 1
        if n_eligible == 0:
            continue
        span_stream = stream ^ _SPAN_SALT
        exact = p * n_eligible
        budget = int(np.floor(exact))
        budget += (mix64(span_stream) >> _S11) / 9007199254740992.0 < exact - budget
        budget = max(1, budget)
        n_selected = 0
        attempt = 0
        while n_selected < budget and attempt < 20 * budget + 20:
            attempt += 1
            h = mix64(span_stream + np.uint64(attempt))
            anchor = eligible[h % np.uint64(n_eligible)]
            if row_labels[anchor] != IGNORE_INDEX:
                continue
            start = anchor
            while start > 0 and is_continuation[row_in[start]] and not is_special[row_in[start - 1]] \
                    and row_labels[start - 1] == IGNORE_INDEX:
                start -= 1
            u = ((mix64(h ^ _SPAN_SALT) >> _S11) + 0.5) / 9007199254740992.0
            words = min(_span_words(u, q, q_max), max_span)
            stop = start
            taken = 0
            while taken < words and stop < seq_len and not is_special[row_in[stop]] \
                    and row_labels[stop] == IGNORE_INDEX:
                end = _word_end(row_in, stop, is_special, is_continuation)
                while stop < end and row_labels[stop] == IGNORE_INDEX and n_selected < budget:
                    row_labels[stop] = row_in[stop]
                    category, pick = _draw_category(category_stream, stop, mask_thr, random_thr, pool_size)
                    row_ids[stop] = mask_id if category == 1 else pool[pick] if category == 2 else row_in[stop]
                    counts[category] += 1
                    n_selected += 1
                    stop += 1
                taken += 1
                if n_selected >= budget or stop < end:
                    break
            span_lengths[words] += 1
        if n_selected == 0:  # every attempt collided: one target, as in the other modes
            j = eligible[_forced_pick(stream, n_eligible)]
            row_labels[j] = row_in[j]
            category, pick = _draw_category(category_stream, j, mask_thr, random_thr, pool_size)
            row_ids[j] = mask_id if category == 1 else pool[pick] if category == 2 else row_in[j]
            counts[category] += 1
            n_selected = 1
            span_lengths[1] += 1
        counts[0] += n_selected


def mask_rows(ids: np.ndarray, seeds: np.ndarray, epoch: int, rule: MaskingRule,
              span_lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask a batch of rows for one epoch (or static copy).

    Args:
        ids: int16 or int32, shape (B, L): unmasked rows with their special tokens in place.
        seeds: uint64, shape (B,): each row's mask seed.
        epoch: the epoch (dynamic) or copy index (static), >= 0.
        rule: vocabulary facts, ratios and the masking unit (token, word or span).
        span_lengths: optional int64 (max_span + 1,): span mode adds the count of placed spans per
            drawn length in words.

    Returns:
        (masked ids like `ids`, labels like `ids` with IGNORE_INDEX off-target,
        int64 counts of shape (4,): selected, [MASK], random, unchanged).

    Raises:
        TypeError/ValueError: on a wrong dtype, shape, a negative epoch or an id outside the vocabulary.
    """
    if ids.ndim != 2 or ids.dtype not in (np.int16, np.int32):
        raise TypeError(f"ids must be a 2-D int16/int32 array, got {ids.dtype} with shape {ids.shape}")
    if seeds.dtype != np.uint64 or seeds.shape != (ids.shape[0],):
        raise TypeError(f"seeds must be uint64 of shape ({ids.shape[0]},), got {seeds.dtype} {seeds.shape}")
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rule.vocab_size):
        raise ValueError(f"ids must lie in [0, {rule.vocab_size}), got range [{ids.min()}, {ids.max()}]")
    ids = np.ascontiguousarray(ids)
    seeds = np.ascontiguousarray(seeds)
    out_ids = ids.copy()
    out_labels = np.full_like(ids, IGNORE_INDEX)
    epoch_key = np.uint64(mix64(np.uint64(epoch) ^ _EPOCH_SALT))
    counts = np.zeros(4, dtype=np.int64)
    if span_lengths is None:
        span_lengths = np.zeros(rule.max_span + 1, dtype=np.int64)
    elif span_lengths.shape != (rule.max_span + 1,) or span_lengths.dtype != np.int64:
        raise TypeError(f"span_lengths must be int64 of shape ({rule.max_span + 1},)")
    mask_thr = draw_threshold(rule.mask_replace_prob, 32)
    random_thr = draw_threshold(min(1.0, rule.mask_replace_prob + rule.random_replace_prob), 32)
    if rule.unit == UNIT_WORD:
        _mask_words_kernel(ids, seeds, epoch_key, rule.is_special, rule.is_continuation,
                           rule.replacement_pool, ids.dtype.type(rule.mask_id),
                           draw_threshold(rule.mlm_probability, 32), mask_thr, random_thr, out_ids, out_labels, counts)
        return out_ids, out_labels, counts
    if rule.unit == UNIT_SPAN:
        _mask_spans_kernel(ids, seeds, epoch_key, rule.is_special, rule.is_continuation, rule.replacement_pool,
                           ids.dtype.type(rule.mask_id), rule.mlm_probability, rule.span_p, rule.max_span, mask_thr,
                           random_thr, out_ids, out_labels, counts, span_lengths)
        return out_ids, out_labels, counts
    select_thr = draw_threshold(rule.mlm_probability, DRAW_BITS)
    _mask_rows_kernel(ids, seeds, epoch_key, rule.is_special, rule.replacement_pool,
                      ids.dtype.type(rule.mask_id), select_thr, mask_thr, random_thr, out_ids, out_labels, counts)
    return out_ids, out_labels, counts
