"""Check a processed output against its manifest: files, checksums (the shards' and INPUTS_FILE's),
schema, ids, row layout, labels and mask ratios. Every problem is a ValidationError naming the shard
(or file) and what is wrong."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipeline.consumers.outputs import (
    ShardMismatch,
    check_id_rows,
    check_no_nulls,
    check_regular_file,
    input_entries,
    load_manifest,
    masking_rule,
    shard_entries,
    tokenizer_spec,
)
from pipeline.kernels.rows.masking import DRAW_BITS, MaskingRule, mask_rows
from pipeline.storage import filesystem
from pipeline.storage.arrow_files import fixed_list_to_numpy
from pipeline.tokenizer.spec import TokenizerError
from schemas import manifest as m
from schemas import options as o
from schemas.shard import (
    ATTENTION_MASK,
    IGNORE_INDEX,
    INPUT_IDS,
    LABELS,
    MASK_SEED,
    MASKING_STATIC,
    id_dtype_for_vocab,
    validate_shard_schema,
)

Z = 6.0  # ratio bounds: Z standard deviations of a binomial proportion of the split's size


class ValidationError(ValueError):
    """The first problem found; the message names the file and the check."""


@dataclass
class SplitTotals:
    eligible: int = 0
    selected: int = 0
    masked: int = 0
    random: int = 0
    forced_expected: float = 0.0  # expected at-least-one targets beyond the Bernoulli draws


def _read_checked(path: str, entry: dict) -> bytes:
    if not filesystem.exists(path):
        raise ValidationError(f"{path}: missing (listed in the manifest)")
    check_regular_file(path, ValidationError)  # a FIFO would block the read forever
    size = filesystem.size(path)
    if size != entry[m.KEY_BYTES]:  # before reading: the whole shard is read into memory
        raise ValidationError(f"{path}: {size} bytes, the manifest says {entry[m.KEY_BYTES]} (truncated?)")
    data = filesystem.read_bytes(path)
    if len(data) != entry[m.KEY_BYTES]:
        raise ValidationError(f"{path}: {len(data)} bytes, the manifest says {entry[m.KEY_BYTES]} (truncated?)")
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry[m.KEY_SHA256]:
        raise ValidationError(f"{path}: sha256 {digest[:16]}... does not match the manifest's "
                              f"{entry[m.KEY_SHA256][:16]}... (corrupted)")
    return data


def _check_layout(path: str, original: np.ndarray, attention: np.ndarray, rule: MaskingRule, tok: dict,
                  packing: str) -> None:
    special = tok[m.KEY_SPECIAL_IDS]
    lengths = attention.sum(axis=1)
    positions = np.arange(original.shape[1])
    rows = np.arange(original.shape[0])
    checks = [
        ((attention == (positions[None, :] < lengths[:, None])).all(axis=1), "attention_mask is not 1s then 0s"),
        (lengths >= 3, "row has no content"),
        (original[:, 0] == special[o.SPECIAL_CLS], "does not start with [CLS]"),
        (original[rows, np.maximum(lengths - 1, 0)] == special[o.SPECIAL_SEP], "has no [SEP] after its content"),
        (np.where(positions[None, :] >= lengths[:, None], original == special[o.SPECIAL_PAD], True).all(axis=1),
         "has something other than [PAD] after [SEP]"),
    ]
    content = (positions[None, :] > 0) & (positions[None, :] < lengths[:, None] - 1)
    inner = [special[o.SPECIAL_CLS], special[o.SPECIAL_PAD]]
    if packing != o.PACKING_CONCAT:  # concat rows hold [SEP] between documents
        inner.append(special[o.SPECIAL_SEP])
    checks.append((~(np.isin(original, inner) & content).any(axis=1), "has [CLS]/[SEP]/[PAD] inside its content"))
    for ok, what in checks:
        if not ok.all():
            raise ValidationError(f"{path}: row {int(np.flatnonzero(~ok)[0])} {what}")


def check_shard(path: str, data: bytes, entry: dict, manifest: dict, rule: MaskingRule, totals: SplitTotals) -> None:
    """Schema, ids, layout, labels and the shard's mask counts."""
    config, tok = manifest[m.KEY_CONFIG], manifest[m.KEY_TOKENIZER]
    seq_len, static = config[o.MAX_SEQ_LENGTH], config[o.MASKING] == MASKING_STATIC
    try:
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as error:
        raise ValidationError(f"{path}: not a readable Arrow stream ({error})") from None
    try:
        validate_shard_schema(table.schema, config[o.MASKING], seq_len, id_dtype_for_vocab(tok[m.KEY_VOCAB_SIZE]))
    except ValueError as error:
        raise ValidationError(f"{path}: {error}") from None
    if table.num_rows != entry[m.KEY_ROWS]:
        raise ValidationError(f"{path}: {table.num_rows} rows, the manifest says {entry[m.KEY_ROWS]}")
    if table.num_rows == 0:
        return
    try:
        check_no_nulls(path, {name: table.column(name) for name in table.column_names})
        ids = fixed_list_to_numpy(table.column(INPUT_IDS), seq_len)
        check_id_rows(path, INPUT_IDS, ids, rule.vocab_size)
        if static:
            labels = fixed_list_to_numpy(table.column(LABELS), seq_len)
            check_id_rows(path, LABELS, labels, rule.vocab_size, ignore=IGNORE_INDEX)
    except ShardMismatch as error:
        raise ValidationError(str(error)) from None
    attention = fixed_list_to_numpy(table.column(ATTENTION_MASK), seq_len)
    if static:
        selected = labels != IGNORE_INDEX
        original = np.where(selected, labels, ids)
        masked, stored = ids, labels
    else:
        original = ids
        masked, stored, _ = mask_rows(ids, table.column(MASK_SEED).to_numpy(), 0, rule)
        selected = stored != IGNORE_INDEX
    _check_layout(path, original, attention, rule, tok, config[o.PACKING])
    if rule.is_special[original[selected]].any():
        raise ValidationError(f"{path}: a special token is a target")
    is_mask = selected & (masked == rule.mask_id)
    random = selected & ~is_mask & (masked != stored)
    if rule.is_special[masked[random]].any():
        raise ValidationError(f"{path}: a random replacement is a special token")
    if (masked[~selected] != original[~selected]).any():
        raise ValidationError(f"{path}: an input id was changed at a position that is not a target")
    counts = entry[m.KEY_MASK_COUNTS]
    if int(selected.sum()) != counts[m.SELECTED] or int(is_mask.sum()) != counts[m.MASKED]:
        raise ValidationError(f"{path}: {int(selected.sum())} targets / {int(is_mask.sum())} [MASK], the manifest "
                              f"says {counts[m.SELECTED]} / {counts[m.MASKED]}")
    eligible_per_row = (~rule.is_special[original]).sum(axis=1)
    totals.eligible += int(eligible_per_row.sum())
    totals.forced_expected += float(np.power(1 - rule.mlm_probability, eligible_per_row).sum())
    totals.selected += int(selected.sum())
    totals.masked += int(is_mask.sum())
    totals.random += int(random.sum())


def _check_ratio(split: str, name: str, hits: int, n: int, p: float, slack: float = 0.0) -> None:
    if n == 0:
        return
    bound = Z * np.sqrt(p * (1 - p) / n) + slack
    if abs(hits / n - p) > bound:
        raise ValidationError(f"{split}: {name} ratio {hits / n:.4f} outside {p:.4f} +- {bound:.4f} (n={n})")


def validate_output(directory: str) -> dict:
    """Validate everything; returns a summary dict. Raises ValidationError at the first problem."""
    try:
        manifest = load_manifest(directory)
        tokenizer_spec(directory, manifest)  # the data's tokenizer, not another file put in its place
        for _ in input_entries(directory, manifest):  # every line checked, then its sha256 and counts
            pass
    except (FileNotFoundError, TokenizerError) as error:
        raise ValidationError(str(error)) from None
    rule = masking_rule(manifest)
    config = manifest[m.KEY_CONFIG]
    summary = {"shards": 0, "rows": 0}
    for split, info in manifest[m.KEY_SPLITS].items():
        listed = {s[m.KEY_FILENAME] for s in info[m.KEY_SHARDS]}
        present = set(filesystem.list_names(filesystem.join(directory, split), ".arrow"))
        for extra in sorted(present - listed):
            raise ValidationError(f"{posixpath.join(directory, split, extra)}: shard not in the manifest")
        totals = SplitTotals()
        for path, entry in shard_entries(directory, manifest, split):
            check_shard(path, _read_checked(path, entry), entry, manifest, rule, totals)
            summary["shards"] += 1
            summary["rows"] += entry[m.KEY_ROWS]
        rows = info[m.KEY_ROWS]
        if config.get(o.MASKING_UNIT, o.UNIT_TOKEN) == o.UNIT_TOKEN:
            p_select = round(config[o.MLM_PROBABILITY] * 2**DRAW_BITS) / 2**DRAW_BITS
            slack = totals.forced_expected / max(totals.eligible, 1)
        else:  # words and spans: per-row rounding and at-least-one add up to one token a row
            p_select, slack = config[o.MLM_PROBABILITY], rows / max(totals.eligible, 1)
        _check_ratio(split, "selected", totals.selected, totals.eligible, p_select, slack=slack)
        _check_ratio(split, "[MASK]", totals.masked, totals.selected, config[o.MASK_REPLACE_PROB])
        _check_ratio(split, "random", totals.random, totals.selected, config[o.RANDOM_REPLACE_PROB],
                     slack=1 / rule.replacement_pool.size)
        summary[split] = {"rows": rows, "selected_ratio": totals.selected / max(totals.eligible, 1)}
    return summary
