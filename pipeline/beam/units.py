"""One unit of work (a book, a jsonl file, a dataset range) to unmasked rows in part files."""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.arrow_io import read_text, write_part, write_text
from pipeline.beam.config import PreprocessConfig
from pipeline.beam.readers import FORMAT_HF, WorkUnit, read_unit
from pipeline.kernels.chunking import Chunks, RowLayout, chunk_tokens, join_documents, pack_sentences
from pipeline.kernels.hashing import (
    content_digest,
    digest_to_u64,
    mask_seeds,
    row_keys,
    short_row_targets,
    validation_rows,
)
from pipeline.kernels.quality import dominant_script, minhash_signature, script_letter_counts, script_shares
from pipeline.tokenizer.encode import AnyTokenizer, tokenize_sentences, tokenize_text
from schemas import manifest as m
from schemas.options import PACKING_CONCAT, PACKING_SENTENCES, VALIDATION_BY_DOCUMENT


@dataclass
class UnitResult:
    """What a worker reports for one unit; the manifest is built only from these and shard results."""

    source: str
    size: int = 0  # bytes of the input (of its range) when it was read
    key: str = ""
    skip_reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    records_skipped: dict[str, int] = field(default_factory=dict)
    parts: dict[str, tuple[str, int]] = field(default_factory=dict)  # split -> (part path, rows)
    duplicate_of: str | None = None  # the first input (by path) with the same content
    unk_fraction: float | None = None  # share of [UNK] among its content tokens (None: not tokenized)
    scripts: dict[str, float] = field(default_factory=dict)  # share of its letters per Unicode script
    signature: str = ""  # MinHash signature of its word bigrams, hex (near-duplicate detection)
    near_duplicate_of: str | None = None  # the earliest input (by path) of its near-duplicate cluster
    similarity: float | None = None  # estimated similarity to near_duplicate_of

    @property
    def dominant_script(self) -> str:
        return dominant_script(self.scripts)

    @property
    def sort_key(self) -> tuple[str, str]:
        """Row order of the output: by content key, then source (ties are identical content)."""
        return (self.key, self.source)


def mark_duplicates(results: list[UnitResult], drop: bool) -> list[UnitResult]:
    """Report inputs whose content equals an earlier input's (by path); with `drop` (--dedup) they
    become skipped inputs contributing no rows."""
    first_by_key: dict[str, str] = {}
    out = []
    for result in sorted(results, key=lambda r: r.source):
        if result.skip_reason is None and result.key and result.key in first_by_key:  # "": no content read
            result = replace(result, duplicate_of=first_by_key[result.key])
            if drop:
                counts = dict.fromkeys(result.counts, 0)
                counts[m.FILES_READ] = result.counts.get(m.FILES_READ, 0)
                counts[m.FILES_SKIPPED] = counts[m.FILES_READ]
                result = replace(result, skip_reason=f"duplicate of {result.duplicate_of} (--dedup)", parts={},
                                 counts=counts)
        elif result.skip_reason is None and result.key:
            first_by_key[result.key] = result.source
        out.append(result)
    return out


def result_path(temp_dir: str, source: str) -> str:
    return part_path(temp_dir, source, "result").replace(".arrow", ".json")


def save_result(temp_dir: str, unit: WorkUnit, result: UnitResult) -> None:
    """Written after the unit's parts are in place: its presence marks the unit done (for --resume)."""
    record = {"identity": unit.identity, "result": asdict(result)}
    write_text(result_path(temp_dir, unit.source), json.dumps(record, sort_keys=True))


def load_result(temp_dir: str, unit: WorkUnit) -> UnitResult | None:
    """A finished unit's result from an interrupted run, if the input is unchanged and its parts exist."""
    path = result_path(temp_dir, unit.source)
    if not FileSystems.exists(path):
        return None
    try:
        record = json.loads(read_text(path))
        result = UnitResult(**record["result"])
        result.parts = {split: (p, rows) for split, (p, rows) in result.parts.items()}
    except (ValueError, KeyError, TypeError):
        return None
    if record["identity"] != unit.identity or not all(FileSystems.exists(p) for p, _ in result.parts.values()):
        return None
    return result


def part_path(temp_dir: str, source: str, split: str) -> str:
    """A part's path is built from a hash of the source, never from the input's own name."""
    name = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return posixpath.join(temp_dir, f"{name}-{split}.arrow")


@dataclass
class _Rows:
    rows: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)
    document_keys: list[np.ndarray] = field(default_factory=list)  # the content key of each row's document

    def add(self, rows: np.ndarray, lengths: np.ndarray, keys: np.ndarray, document_key: np.uint64) -> None:
        self.rows.append(rows)
        self.lengths.append(lengths)
        self.keys.append(keys)
        self.document_keys.append(np.full(rows.shape[0], document_key, dtype=np.uint64))


def _chunk_into(out: _Rows, tokens: np.ndarray, digest: str, layout: RowLayout, dtype: np.dtype,
                counts: dict[str, int]) -> None:
    _add_chunks(out, chunk_tokens(tokens, layout, dtype), tokens, digest, layout, counts)


def _add_chunks(out: _Rows, chunks: Chunks, tokens: np.ndarray, digest: str, layout: RowLayout,
                counts: dict[str, int]) -> None:
    counts[m.TOKENS] += int(tokens.shape[0])
    counts[m.UNK_TOKENS] += int((tokens == layout.unk_id).sum())
    counts[m.TOKENS_DROPPED] += chunks.dropped_tokens
    counts[m.SHORT_ROWS_DROPPED] += int(chunks.dropped_tokens > 0)
    counts[m.DOCUMENTS_TOO_SHORT] += int(chunks.rows.shape[0] == 0)
    counts[m.ROWS] += chunks.rows.shape[0]
    document_key = digest_to_u64(digest)
    out.add(chunks.rows, chunks.lengths, row_keys(document_key, chunks.rows.shape[0]), document_key)


STAGE_READ = "read_clean"
STAGE_QUALITY = "quality"  # script mix and MinHash signature
SIGNATURE_SEED = 0x4D696E48  # fixed: near-duplicate pairs do not depend on --seed
STAGE_TOKENIZE = "tokenize_chunk"
STAGE_WRITE_PARTS = "write_parts"


class StageClock:
    """Wall seconds spent per stage in this process (reported as Beam metrics, never in the output)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._since = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._since
        self._since = now

    def restart(self) -> None:
        self._since = time.perf_counter()


def process_unit(unit: WorkUnit, tokenizer: AnyTokenizer, layout: RowLayout, id_dtype: np.dtype,
                 config: PreprocessConfig, temp_dir: str, clock: StageClock | None = None) -> UnitResult:
    """Read, clean, tokenize and chunk one unit; write its train and validation rows as parts.

    A unit finished by an interrupted run of the same config (its result record is in `temp_dir`
    and the input is unchanged) is not processed again."""
    done = load_result(temp_dir, unit)
    if done is not None:
        return done
    result = _process(unit, tokenizer, layout, id_dtype, config, temp_dir, clock or StageClock())
    save_result(temp_dir, unit, result)
    return result


def _process(unit: WorkUnit, tokenizer: AnyTokenizer, layout: RowLayout, id_dtype: np.dtype,
             config: PreprocessConfig, temp_dir: str, clock: StageClock) -> UnitResult:
    result = UnitResult(source=unit.source, size=unit.size, counts=dict.fromkeys(m.INPUT_COUNT_NAMES, 0))
    counts = result.counts
    clock.restart()
    read = read_unit(unit, config.text_column, config.keep_boilerplate)
    clock.lap(STAGE_READ)
    # A byte range of a large file is not a file: the file counts once, with its first range.
    is_range = bool(unit.path)
    counts[m.FILES_READ] = int(unit.format != FORMAT_HF and (not is_range or unit.start == 0))
    counts[m.REPLACED_BYTES] = read.replaced_bytes
    counts[m.BOILERPLATE_CHARS_REMOVED] = read.boilerplate_chars_removed
    counts[m.RECORDS_SKIPPED] = sum(read.records_skipped.values())
    result.records_skipped = read.records_skipped
    if read.skip_reason is not None and is_range and read.skip_reason.startswith(("empty", "no usable records")):
        return result  # a range holding no record start, or only bad lines (counted as records skipped)
    if read.skip_reason is not None:
        counts[m.FILES_SKIPPED] = counts[m.FILES_READ]
        result.skip_reason = read.skip_reason
        return result

    digests = [content_digest(doc) for doc in read.documents]
    counts[m.DOCUMENTS] = len(digests)
    counts[m.CHARACTERS] = sum(len(doc) for doc in read.documents)
    result.key = digests[0] if len(digests) == 1 else hashlib.sha256("".join(digests).encode()).hexdigest()
    _measure_quality(read.documents, result)
    clock.lap(STAGE_QUALITY)
    if config.scripts and result.dominant_script not in config.scripts:
        return _gated(result, f"script: mostly {result.dominant_script or 'no letters'} "
                              f"({', '.join(f'{k} {v:.0%}' for k, v in result.scripts.items()) or 'no letters'}), "
                              f"not in --scripts {','.join(config.scripts)}")
    rows = _pack(read.documents, digests, result.key, tokenizer, layout, id_dtype, config, counts)
    clock.lap(STAGE_TOKENIZE)
    result.unk_fraction = round(counts[m.UNK_TOKENS] / counts[m.TOKENS], 4) if counts[m.TOKENS] else 0.0
    if counts[m.TOKENS] and counts[m.UNK_TOKENS] / counts[m.TOKENS] > config.max_unk_fraction:
        return _gated(result, f"[UNK] gate: {counts[m.UNK_TOKENS] / counts[m.TOKENS]:.1%} of its "
                              f"{counts[m.TOKENS]:,} tokens are [UNK] for tokenizer {config.tokenizer} "
                              f"(--max_unk_fraction {config.max_unk_fraction})")
    result = _write_parts(rows, unit, layout, id_dtype, config, temp_dir, result)
    clock.lap(STAGE_WRITE_PARTS)
    return result


def _measure_quality(documents: list[str], result: UnitResult) -> None:
    """Script mix and MinHash signature of a unit's text (all its documents together)."""
    letters = None
    encoded = [doc.encode("utf-8", "surrogatepass") for doc in documents]
    for data in encoded:
        letters = script_letter_counts(data, letters)
    result.scripts = script_shares(letters) if letters is not None else {}
    joined = encoded[0] if len(encoded) == 1 else b"\n".join(encoded)
    result.signature = minhash_signature(joined, seed=SIGNATURE_SEED).tobytes().hex()


def _gated(result: UnitResult, reason: str) -> UnitResult:
    """A unit a quality gate keeps out: skipped with the reason, contributing no rows or tokens."""
    kept = (m.FILES_READ, m.DOCUMENTS, m.CHARACTERS, m.REPLACED_BYTES, m.BOILERPLATE_CHARS_REMOVED,
            m.RECORDS_SKIPPED)
    result.counts = {name: (value if name in kept else 0) for name, value in result.counts.items()}
    result.counts[m.FILES_SKIPPED] = result.counts[m.FILES_READ]
    result.skip_reason = reason
    return result


def _pack(documents: list[str], digests: list[str], unit_key: str, tokenizer: AnyTokenizer, layout: RowLayout,
          id_dtype: np.dtype, config: PreprocessConfig, counts: dict[str, int]) -> _Rows:
    """Tokenize and cut the documents of a unit into rows, as `--packing` says."""
    rows = _Rows()
    if config.packing == PACKING_SENTENCES:
        for doc, digest in zip(documents, digests):
            tokens, sentence_lengths = tokenize_sentences(tokenizer, doc)
            slots = len(sentence_lengths) + tokens.shape[0] // layout.content_len + 2
            targets = short_row_targets(digest_to_u64(digest), slots, config.short_seq_prob, layout.content_len)
            chunks = pack_sentences(tokens, sentence_lengths, layout, id_dtype, targets)
            _add_chunks(rows, chunks, tokens, digest, layout, counts)
        return rows
    token_streams = [tokenize_text(tokenizer, doc) for doc in documents]
    if config.packing == PACKING_CONCAT:
        _chunk_into(rows, join_documents(token_streams, layout.sep_id), unit_key, layout, id_dtype, counts)
        counts[m.TOKENS] -= max(0, len(token_streams) - 1)  # separators are not content tokens
    else:
        for tokens, digest in zip(token_streams, digests):
            _chunk_into(rows, tokens, digest, layout, id_dtype, counts)
    return rows


def _write_parts(rows: _Rows, unit: WorkUnit, layout: RowLayout, id_dtype: np.dtype, config: PreprocessConfig,
                 temp_dir: str, result: UnitResult) -> UnitResult:
    """Seeds and the train/validation assignment of every row, then one part file per split."""
    all_rows = np.concatenate(rows.rows) if rows.rows else np.zeros((0, layout.seq_len), id_dtype)
    lengths = np.concatenate(rows.lengths) if rows.lengths else np.zeros(0, np.int32)
    keys = np.concatenate(rows.keys) if rows.keys else np.zeros(0, np.uint64)
    seeds = mask_seeds(keys, config.seed)
    # By row, rows of one book land in both splits (an optimistic validation loss); by document, a
    # document's content key sends all its rows one way (with --packing concat: the rows' group).
    by_document = config.validation_unit == VALIDATION_BY_DOCUMENT
    split_keys = (np.concatenate(rows.document_keys) if rows.document_keys else keys) if by_document else keys
    in_validation = validation_rows(split_keys, config.validation_fraction)
    for split, selector in ((m.TRAIN, ~in_validation), (m.VALIDATION, in_validation)):
        n = int(selector.sum())
        if n:
            path = part_path(temp_dir, unit.source, split)
            write_part(path, all_rows[selector], lengths[selector], seeds[selector])
            result.parts[split] = (path, n)
    return result
