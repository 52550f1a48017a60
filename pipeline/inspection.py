"""Read back a processed split and measure its masks: the figures `jobs.inspect` prints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.arrow_io import fixed_list_to_numpy, read_table
from pipeline.masking import MaskingRule, mask_rows
from pipeline.outputs import shard_paths
from pipeline.tokenization import TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas.shard import IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED, MASKING_STATIC


@dataclass(frozen=True)
class MaskedRows:
    """Masked rows of a split. ids, labels: (n, L); original: (n, L), the unmasked ids where known
    (dynamic output), else None."""

    ids: np.ndarray
    labels: np.ndarray
    original: np.ndarray | None


def read_split_rows(directory: str, split: str, manifest: dict, rule: MaskingRule, epoch: int) -> MaskedRows:
    """All rows of one split, masked: as stored (static) or with `epoch` (dynamic)."""
    config = manifest[m.KEY_CONFIG]
    seq_len = config["max_seq_length"]
    ids, labels, original = [], [], []
    for path in shard_paths(directory, manifest, split):
        table = read_table(path)
        stored = fixed_list_to_numpy(table.column(INPUT_IDS), seq_len)
        if config["masking"] == MASKING_STATIC:
            ids.append(stored)
            labels.append(fixed_list_to_numpy(table.column(LABELS), seq_len))
        else:
            masked, shard_labels, _ = mask_rows(stored, table.column(MASK_SEED).to_numpy(), epoch, rule)
            ids.append(masked)
            labels.append(shard_labels)
            original.append(stored)
    empty = np.zeros((0, seq_len), dtype=np.int32)
    return MaskedRows(
        ids=np.concatenate(ids) if ids else empty,
        labels=np.concatenate(labels) if labels else empty,
        original=(np.concatenate(original) if original else empty) if config["masking"] != MASKING_STATIC else None,
    )


def mask_statistics(rows: MaskedRows, rule: MaskingRule) -> dict:
    """Selected share of eligible tokens and the [MASK]/random/unchanged shares of the selected,
    computed from the stored rows alone."""
    selected = rows.labels != IGNORE_INDEX
    eligible = selected | ~rule.is_special[rows.ids]
    masked = selected & (rows.ids == rule.mask_id)
    random = selected & ~masked & (rows.ids != rows.labels)
    unchanged = selected & ~masked & (rows.ids == rows.labels)
    n_selected = int(selected.sum())
    denominator = max(n_selected, 1)
    return {
        "eligible": int(eligible.sum()),
        "selected": n_selected,
        "labelled": int((rows.labels != IGNORE_INDEX).sum()),
        "selected_ratio": n_selected / max(int(eligible.sum()), 1),
        "mask_ratio": int(masked.sum()) / denominator,
        "random_ratio": int(random.sum()) / denominator,
        "unchanged_ratio": int(unchanged.sum()) / denominator,
    }


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
