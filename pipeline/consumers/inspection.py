"""Read back a processed split and measure its masks: the figures `jobs.inspect_output` prints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.consumers.outputs import check_id_rows, check_no_nulls, shard_entries, verify_shard
from pipeline.kernels.rows.masking import MaskingRule, mask_rows
from pipeline.storage.arrow_files import fixed_list_to_numpy, open_batches
from pipeline.tokenizer.spec import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas import options as o
from schemas.shard import IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED, MASKING_STATIC

SAMPLE_ROWS = 10_000  # rows jobs.inspect_output reads (whole record batches, from the first shards)
Z = 6.0  # the check line's ratio bound, in binomial standard deviations of the sample


@dataclass(frozen=True)
class MaskedRows:
    """Masked rows of a split. ids, labels: (n, L), as a model sees them; original: (n, L), the
    unmasked ids (the stored row for dynamic output; labels put back at the targets for static)."""

    ids: np.ndarray
    labels: np.ndarray
    original: np.ndarray


def read_split_rows(directory: str, split: str, manifest: dict, rule: MaskingRule, epoch: int,
                    max_rows: int | None = None) -> MaskedRows:
    """Rows of one split, masked as stored (static) or with `epoch` (dynamic): all of them, or the
    first whole record batches holding at least `max_rows` rows (nothing else is read). A shard is
    checked against the manifest (size, sha256) before it is opened, its ids and labels against
    the vocabulary before they index the masking tables.

    Raises:
        ShardMismatch: a shard that is not the manifest's, or ids outside the vocabulary.
    """
    config = manifest[m.KEY_CONFIG]
    seq_len = config[o.MAX_SEQ_LENGTH]
    static = config[o.MASKING] == MASKING_STATIC
    ids, labels, original = [], [], []
    def enough() -> bool:
        return max_rows is not None and sum(x.shape[0] for x in ids) >= max_rows

    for path, entry in shard_entries(directory, manifest, split):
        if enough():
            break
        verify_shard(path, entry)
        first_row = 0
        for batch in open_batches(path):
            if enough():
                break
            third = LABELS if static else MASK_SEED
            check_no_nulls(path, {INPUT_IDS: batch.column(INPUT_IDS), third: batch.column(third)}, first_row)
            stored = fixed_list_to_numpy(batch.column(INPUT_IDS), seq_len)
            check_id_rows(path, INPUT_IDS, stored, rule.vocab_size, first_row)
            if static:
                stored_labels = fixed_list_to_numpy(batch.column(LABELS), seq_len)
                check_id_rows(path, LABELS, stored_labels, rule.vocab_size, first_row, IGNORE_INDEX)
                ids.append(stored)
                labels.append(stored_labels)
                original.append(np.where(stored_labels != IGNORE_INDEX, stored_labels, stored))
            else:
                masked, batch_labels, _ = mask_rows(stored, batch.column(MASK_SEED).to_numpy(), epoch, rule)
                ids.append(masked)
                labels.append(batch_labels)
                original.append(stored)
            first_row += batch.num_rows
    if not ids:
        empty = np.zeros((0, seq_len), dtype=np.int32)
        return MaskedRows(ids=empty, labels=empty, original=empty)
    return MaskedRows(ids=np.concatenate(ids), labels=np.concatenate(labels), original=np.concatenate(original))


def mask_statistics(rows: MaskedRows, rule: MaskingRule) -> dict:
    """Selected share of eligible tokens and the [MASK]/random/unchanged shares of the selected."""
    selected = rows.labels != IGNORE_INDEX
    eligible = ~rule.is_special[rows.original]
    masked = selected & (rows.ids == rule.mask_id)
    random = selected & ~masked & (rows.ids != rows.labels)
    unchanged = selected & ~masked & (rows.ids == rows.labels)
    n_selected = int(selected.sum())
    denominator = max(n_selected, 1)
    return {
        "eligible": int(eligible.sum()),
        "selected": n_selected,
        "selected_ratio": n_selected / max(int(eligible.sum()), 1),
        "mask_ratio": int(masked.sum()) / denominator,
        "random_ratio": int(random.sum()) / denominator,
        "unchanged_ratio": int(unchanged.sum()) / denominator,
    }


def check_rows(rows: MaskedRows, rule: MaskingRule, stats: dict, config: dict) -> list[str]:
    """What is wrong with the rows, [] when nothing: targets only at ordinary tokens, labels equal to
    the original token, ids unchanged off-target, no special token as a random replacement, and
    the ratios within Z standard deviations of the configured rates (token masking only for the
    selection rate: words and spans select by another unit)."""
    problems = []
    selected = rows.labels != IGNORE_INDEX
    if rule.is_special[rows.original[selected]].any():
        problems.append("a special token is a target")
    if (rows.labels[selected] != rows.original[selected]).any():
        problems.append("a label differs from the original token")
    if (rows.ids[~selected] != rows.original[~selected]).any():
        problems.append("an id was changed at a position that is not a target")
    replaced = selected & (rows.ids != rule.mask_id) & (rows.ids != rows.labels)
    if rule.is_special[rows.ids[replaced]].any():
        problems.append("a random replacement is a special token")
    checks = [("[MASK]", stats["mask_ratio"], config[o.MASK_REPLACE_PROB], stats["selected"]),
              ("random", stats["random_ratio"], config[o.RANDOM_REPLACE_PROB], stats["selected"])]
    if config.get(o.MASKING_UNIT, o.UNIT_TOKEN) == o.UNIT_TOKEN:
        checks.append(("selected", stats["selected_ratio"], config[o.MLM_PROBABILITY], stats["eligible"]))
    for name, got, want, n in checks:
        bound = Z * np.sqrt(want * (1 - want) / max(n, 1))
        if name == "selected":  # rows with no Bernoulli target get one: at most one a row on top
            bound += rows.ids.shape[0] / max(n, 1)
        if n and abs(got - want) > bound:
            problems.append(f"{name} ratio {got:.4f} outside {want} +- {bound:.4f}")
    return problems


def decode_row(rows: MaskedRows, index: int, spec: TokenizerSpec, max_tokens: int = 80) -> str:
    """A row as text, targets marked: [MASK]<orig>, random>new<orig>, =orig; padding elided."""
    tokenizer = build_tokenizer(spec)
    out = []
    for ids_value, label in zip(rows.ids[index].tolist(), rows.labels[index].tolist()):
        if ids_value == spec.pad_id and label == IGNORE_INDEX:
            break
        token = tokenizer.id_to_token(ids_value)
        if label == IGNORE_INDEX:
            out.append(token)
        elif ids_value == spec.mask_id:
            out.append(f"[MASK]<{tokenizer.id_to_token(label)}>")
        elif ids_value != label:
            out.append(f"random>{token}<{tokenizer.id_to_token(label)}>")
        else:
            out.append(f"={token}")
        if len(out) >= max_tokens:
            out.append("...")
            break
    return " ".join(out)
