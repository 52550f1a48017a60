"""Write the `datasets` side files, INPUTS_FILE and the manifest from what the workers reported.

The manifest is written last: its presence marks a complete output. A run that made no rows writes
none of them (`no_rows`): its would-be manifest goes to the temp folder, which stays.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import numpy as np

from pipeline import __version__
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.folders import delete_folder
from pipeline.beam.run.no_rows import made_rows
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.arrow_io import write_text
from pipeline.beam.writing.inputs_file import merge_runs
from pipeline.beam.writing.sharding import ShardResult
from pipeline.tokenizer.transformers_files import transformers_files
from schemas import manifest as m
from schemas.shard import shard_features


def reason_kind(reason: str) -> str:
    """The kind of a skip reason, for counting: 'not text: an HTML/XML page' -> 'not text: an HTML/XML
    page'; 'unreadable: EOFError: ...' -> 'unreadable: EOFError'; 'duplicate of X' -> 'duplicate'."""
    if reason.startswith("duplicate of"):
        return "duplicate"
    if reason.startswith("near duplicate of"):
        return "near duplicate"
    if reason.startswith(("[UNK] gate:", "script:")):
        return reason.split(":")[0]
    if reason.startswith("unreadable:"):
        return ":".join(reason.split(":")[:2])
    return reason


def count_by_kind(reasons: list[str]) -> dict[str, int]:
    """How many skip reasons of each kind (see reason_kind), sorted by kind: the manifest's
    FILES_SKIPPED_BY_REASON and every job's skip report."""
    by_kind: dict[str, int] = {}
    for reason in reasons:
        kind = reason_kind(reason)
        by_kind[kind] = by_kind.get(kind, 0) + 1
    return dict(sorted(by_kind.items()))


KINDS = "kinds"  # in the totals: inputs skipped per reason kind


def unit_totals(u: UnitResult) -> dict:
    """What one unit result adds to the manifest's totals: its counts, its skip reason's kind."""
    kinds = {reason_kind(u.skip_reason): 1} if u.skip_reason is not None else {}
    return {m.KEY_COUNTS: {name: u.counts.get(name, 0) for name in m.INPUT_COUNT_NAMES}, KINDS: kinds}


def add_totals(totals: Iterable[dict]) -> dict:
    """The sum of unit_totals (a Beam combine: associative, commutative, an empty sum allowed)."""
    counts, kinds = dict.fromkeys(m.INPUT_COUNT_NAMES, 0), {}
    for one in totals:
        for name, n in one[m.KEY_COUNTS].items():
            counts[name] += n
        for kind, n in one[KINDS].items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {m.KEY_COUNTS: counts, KINDS: dict(sorted(kinds.items()))}


def _splits(shards: list[ShardResult]) -> dict:
    splits = {}
    for split in m.SPLITS:
        mine = sorted((s for s in shards if s.split == split), key=lambda s: s.index)
        splits[split] = {
            m.KEY_ROWS: sum(s.rows for s in mine),
            m.KEY_MASK_COUNTS: {k: sum(s.mask_counts[k] for s in mine) for k in m.MASK_COUNT_NAMES},
            m.KEY_SHARDS: [
                {m.KEY_FILENAME: s.filename, m.KEY_ROWS: s.rows, m.KEY_BYTES: s.bytes, m.KEY_SHA256: s.sha256,
                 m.KEY_MASK_COUNTS: s.mask_counts, m.KEY_PLAN: s.plan}
                for s in mine
            ],
        }
    return splits


def build_manifest(totals: dict, shards: list[ShardResult], config: PreprocessConfig, tokenizer_info: dict,
                   inputs_file: dict) -> dict:
    """The manifest: config, tokenizer, counts (with the skip reasons' kinds), every shard with its
    checksum, and the record of INPUTS_FILE (`merge_runs`'s), which lists every input: its size does
    not grow with the number of inputs."""
    counts = dict(totals[m.KEY_COUNTS])
    splits = _splits(shards)
    for name in m.MASK_COUNT_NAMES:
        counts[name] = sum(splits[split][m.KEY_MASK_COUNTS][name] for split in m.SPLITS)
    counts[m.FILES_SKIPPED_BY_REASON] = dict(totals[KINDS])
    return {
        m.KEY_VERSION: m.MANIFEST_VERSION,
        m.KEY_PACKAGE_VERSION: __version__,
        m.KEY_CONFIG: config.to_record(),
        m.KEY_TOKENIZER: tokenizer_info,
        m.KEY_COUNTS: counts,
        # Dynamic output stores unmasked rows: its mask counts are those of epoch 0.
        m.KEY_MASK_COUNTS_EPOCH: 0,
        m.KEY_SPLITS: splits,
        m.KEY_INPUTS_FILE: inputs_file,
    }


def finalize_output(totals: dict, runs: list[str], shards: list[ShardResult], config: PreprocessConfig,
                    tokenizer_info: dict, id_dtype: np.dtype, tokenizer_json: str) -> dict:
    """Merge the sorted runs of per-input lines into INPUTS_FILE, write state.json / dataset_info.json
    per split, dataset_dict.json and a copy of the tokenizer with the configs
    `transformers.AutoTokenizer` reads, then manifest.json; drop temp parts. A run that made no rows
    writes its INPUTS_FILE and its manifest (NO_ROWS_FILE) to the temp folder only and keeps that
    folder: the run failed, its folder can be continued."""
    temp_dir = posixpath.join(config.output, m.TEMP_DIR)
    rows = any(s.rows for s in shards)
    inputs_file = merge_runs(runs, posixpath.join(config.output if rows else temp_dir, m.INPUTS_FILE))
    manifest = build_manifest(totals, shards, config, tokenizer_info, inputs_file)
    if not made_rows(manifest):
        write_text(posixpath.join(temp_dir, m.NO_ROWS_FILE), m.dumps(manifest))
        return manifest
    features = shard_features(config.masking, config.max_seq_length, id_dtype)
    for split in m.SPLITS:
        mine = sorted((s for s in shards if s.split == split), key=lambda s: s.index)
        folder = posixpath.join(config.output, split)
        write_text(posixpath.join(folder, m.DATASET_INFO_FILE), m.dumps(m.dataset_info(features)))
        state = m.dataset_state(split, [s.filename for s in mine], [s.sha256 for s in mine])
        write_text(posixpath.join(folder, m.STATE_FILE), m.dumps(state))
    write_text(posixpath.join(config.output, m.DATASET_DICT_FILE), m.dumps(m.dataset_dict()))
    write_text(posixpath.join(config.output, m.TOKENIZER_FILE), tokenizer_json)
    for name, text in transformers_files(tokenizer_json, tokenizer_info, config.max_seq_length).items():
        write_text(posixpath.join(config.output, name), text)
    write_text(posixpath.join(config.output, m.MANIFEST_FILE), m.dumps(manifest))
    delete_folder(posixpath.join(config.output, m.TEMP_DIR))  # on object stores too (a prefix)
    return manifest
