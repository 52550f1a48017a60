"""Write the `datasets` side files and the manifest from what the workers reported.

The manifest is written last: its presence marks a complete output. A run that made no rows writes
none of them (`no_rows`): its would-be manifest goes to the temp folder, which stays.
"""

from __future__ import annotations

import posixpath

import numpy as np

from pipeline import __version__
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.folders import delete_folder
from pipeline.beam.run.no_rows import made_rows
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.arrow_io import write_text
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


def boilerplate_share(counts: dict[str, int]) -> float:
    """Share of an input's characters cut as Project Gutenberg header and licence."""
    removed = counts.get(m.BOILERPLATE_CHARS_REMOVED, 0)
    return round(removed / max(removed + counts.get(m.CHARACTERS, 0), 1), 4)


def _quality(u: UnitResult) -> dict:
    """The per-input quality figures of the manifest: [UNK] fraction, script mix, dominant script."""
    return {m.KEY_UNK_FRACTION: u.unk_fraction, m.KEY_SCRIPTS: u.scripts, m.KEY_DOMINANT_SCRIPT: u.dominant_script}


def build_manifest(units: list[UnitResult], shards: list[ShardResult], config: PreprocessConfig,
                   tokenizer_info: dict, near_duplicates: list[dict] | None = None) -> dict:
    """The manifest: config, tokenizer, counts, skipped inputs, and every shard with its checksum."""
    units = sorted(units, key=lambda u: u.sort_key)
    counts = {name: sum(u.counts.get(name, 0) for u in units) for name in m.INPUT_COUNT_NAMES}
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
    for name in m.MASK_COUNT_NAMES:
        counts[name] = sum(splits[split][m.KEY_MASK_COUNTS][name] for split in m.SPLITS)
    skipped = [{m.KEY_PATH: u.source, m.KEY_SIZE: u.size, m.KEY_REASON: u.skip_reason, **_quality(u)}
               for u in sorted(units, key=lambda u: u.source) if u.skip_reason is not None]
    counts[m.FILES_SKIPPED_BY_REASON] = count_by_kind([entry[m.KEY_REASON] for entry in skipped])
    inputs = [
        {m.KEY_PATH: u.source, m.KEY_SIZE: u.size, "content_sha256": u.key, m.KEY_ROWS: u.counts.get(m.ROWS, 0),
         m.TOKENS: u.counts.get(m.TOKENS, 0), m.UNK_TOKENS: u.counts.get(m.UNK_TOKENS, 0),
         m.RECORDS_SKIPPED: u.records_skipped,
         m.BOILERPLATE_CHARS_REMOVED: u.counts.get(m.BOILERPLATE_CHARS_REMOVED, 0),
         m.KEY_BOILERPLATE_SHARE: boilerplate_share(u.counts), **_quality(u)}
        for u in sorted(units, key=lambda u: u.source) if u.skip_reason is None
    ]
    duplicates = [{m.KEY_PATH: u.source, m.KEY_DUPLICATE_OF: u.duplicate_of}
                  for u in sorted(units, key=lambda u: u.source) if u.duplicate_of]
    return {
        m.KEY_DUPLICATES: duplicates,
        m.KEY_NEAR_DUPLICATES: sorted(near_duplicates or [], key=lambda e: (e[m.KEY_PATH], e[m.KEY_NEAR_DUPLICATE_OF])),
        m.KEY_VERSION: m.MANIFEST_VERSION,
        m.KEY_PACKAGE_VERSION: __version__,
        m.KEY_CONFIG: config.to_record(),
        m.KEY_TOKENIZER: tokenizer_info,
        m.KEY_COUNTS: counts,
        # Dynamic output stores unmasked rows: its mask counts are those of epoch 0.
        m.KEY_MASK_COUNTS_EPOCH: 0,
        m.KEY_SPLITS: splits,
        m.KEY_SKIPPED: skipped,
        m.KEY_INPUTS: inputs,
    }


def finalize_output(units: list[UnitResult], shards: list[ShardResult], config: PreprocessConfig,
                    tokenizer_info: dict, id_dtype: np.dtype, tokenizer_json: str,
                    near_duplicates: list[dict] | None = None) -> dict:
    """Write state.json / dataset_info.json per split, dataset_dict.json and a copy of the tokenizer
    with the configs `transformers.AutoTokenizer` reads, then manifest.json; drop temp parts. A run
    that made no rows only writes its manifest to the temp folder (NO_ROWS_FILE) and keeps that folder:
    the run failed, its folder can be continued."""
    manifest = build_manifest(units, shards, config, tokenizer_info, near_duplicates or [])
    if not made_rows(manifest):
        write_text(posixpath.join(config.output, m.TEMP_DIR, m.NO_ROWS_FILE), m.dumps(manifest))
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
