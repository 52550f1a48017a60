"""One unit of work (a book, a jsonl file, a dataset range) to unmasked rows in part files: the two
passes (scan, then tokenize and cut rows) and the quality gates between them, with what every unit
of a job is processed with (`UnitContext`). The result model and resume records live in
`unit_results`, exact duplicates in `dedup.exact`, the part files in `writing.part_writer`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.formats.registry import input_format
from pipeline.beam.reading.formats.text import SIGNATURE_SEED
from pipeline.beam.reading.reader import UnitReader, UnitScan, input_changed
from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.unit_results import UnitResult, load_result, save_result
from pipeline.beam.writing.part_writer import MemberWriter, PartWriter
from pipeline.kernels.common.hashing import digest_to_u64, short_row_targets
from pipeline.kernels.rows.chunking import RowLayout, RowStream
from pipeline.kernels.text.quality import MinHasher, script_shares
from pipeline.tokenizer.encode import AnyTokenizer, DocumentEncoder, DocumentTooLong, nonzero_lengths
from pipeline.tokenizer.spec import TokenizerSpec
from schemas import manifest as m
from schemas.options import PACKING_CONCAT, PACKING_SENTENCES
from schemas.shard import id_dtype_for_vocab

STAGE_READ = "read_clean"
STAGE_QUALITY = "quality"  # script mix and MinHash signature
STAGE_TOKENIZE = "tokenize_chunk"
STAGE_WRITE_PARTS = "write_parts"


@dataclass(frozen=True)
class UnitContext:
    """What every unit of one job is tokenized and written with, built once (`TokenizeAndChunk`) and
    shipped to the workers without its tokenizer: a worker builds the tokenizer at its first element
    and adds it (`with_tokenizer`). Stitching an input's splits needs no tokenizer."""

    layout: RowLayout
    id_dtype: np.dtype
    config: PreprocessConfig
    temp_dir: str
    tokenizer: AnyTokenizer | None = None

    @classmethod
    def from_spec(cls, spec: TokenizerSpec, config: PreprocessConfig, temp_dir: str,
                  tokenizer: AnyTokenizer | None = None) -> UnitContext:
        """The context of a job tokenizing with `spec`: its row layout for `config`, its id dtype."""
        return cls(spec.layout(config.max_seq_length, config.min_tokens), id_dtype_for_vocab(spec.vocab_size), config,
                   temp_dir, tokenizer)

    def with_tokenizer(self, tokenizer: AnyTokenizer) -> UnitContext:
        return dataclasses.replace(self, tokenizer=tokenizer)

    @property
    def encoder_tokenizer(self) -> AnyTokenizer:
        """The tokenizer, for the steps that tokenize.

        Raises:
            RuntimeError: the context has none (built on the launcher; see `with_tokenizer`).
        """
        if self.tokenizer is None:
            raise RuntimeError("this UnitContext has no tokenizer: a worker adds its own with with_tokenizer()")
        return self.tokenizer


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


def process_unit(unit: WorkUnit, context: UnitContext, clock: StageClock | None = None) -> UnitResult:
    """Read, clean, tokenize and chunk one unit; write its train and validation rows as parts.

    A unit finished by an interrupted run of the same config (its result record is in the context's
    `temp_dir` and the input is unchanged) is not processed again."""
    done = load_result(context.temp_dir, unit)
    if done is not None:
        return done
    result = _process(unit, context, clock or StageClock())
    save_result(context.temp_dir, unit, result)
    return result


def _process(unit: WorkUnit, context: UnitContext, clock: StageClock) -> UnitResult:
    reader = UnitReader(unit, context.config.text_column, context.config.keep_boilerplate)
    result, scan = scan_unit(reader, context.config, clock)
    if result.skip_reason is not None or scan.skip_reason is not None:
        return result
    return check_unchanged(unit, tokenize_unit(reader, result, context, clock))


def check_unchanged(unit: WorkUnit, result: UnitResult, discard: Callable[[], None] | None = None) -> UnitResult:
    """The result, or (when the input is not the one listed: it changed or grew while it was read,
    once or twice) the input skipped with the reason: its rows would mix two versions, carry the
    old version's content key, or hold tokens of more bytes than the manifest records. Its rows
    go: its parts are deleted, or `discard` drops them (an input of a group, not yet written)."""
    changed = input_changed(unit)
    if changed is None or result.skip_reason is not None:
        return result
    if discard is not None:
        discard()
    else:
        for path, _ in result.parts.values():
            FileSystems.delete([path])
    result = _gated(result, changed)
    result.counts = {name: (value if name == m.FILES_READ else 0) for name, value in result.counts.items()}
    result.counts[m.FILES_SKIPPED] = result.counts[m.FILES_READ]
    return result


def scan_unit(reader: UnitReader, config: PreprocessConfig, clock: StageClock) -> tuple[UnitResult, UnitScan]:
    """The first pass: the unit's result as far as it is known before tokenizing (skipped with the
    reason, or kept out by --scripts)."""
    unit = reader.unit
    result = UnitResult(source=unit.source, size=unit.size, counts=dict.fromkeys(m.INPUT_COUNT_NAMES, 0),
                        file=unit.path)
    counts = result.counts
    clock.restart()
    scan = reader.scan()
    clock.lap(STAGE_READ)
    # A line range of a large file is not a file: the file counts once, with its first range.
    is_range = bool(unit.path)
    counts[m.FILES_READ] = int(input_format(unit.format).from_file and (not is_range or unit.start == 0))
    counts[m.REPLACED_BYTES] = scan.replaced_bytes
    counts[m.BOILERPLATE_CHARS_REMOVED] = scan.boilerplate_chars_removed
    counts[m.RECORDS_SKIPPED] = sum(scan.records_skipped.values())
    result.records_skipped = scan.records_skipped
    if scan.skip_reason is not None and is_range and scan.skip_reason.startswith(("empty", "no usable records")):
        return result, scan  # a range holding no record start, or only bad lines (counted as records skipped)
    if scan.skip_reason is not None:
        counts[m.FILES_SKIPPED] = counts[m.FILES_READ]
        result.skip_reason = scan.skip_reason
        return result, scan
    counts[m.DOCUMENTS] = scan.documents
    counts[m.CHARACTERS] = scan.characters
    result.key = scan.key
    result.scripts = script_shares(scan.letters) if scan.letters is not None else {}
    if scan.signature is not None:
        result.signature = scan.signature.tobytes().hex()
    clock.lap(STAGE_QUALITY)
    if config.scripts and result.dominant_script not in config.scripts:
        result = _gated(result, _script_reason(result, config.scripts))
    return result, scan


def _script_reason(result: UnitResult, scripts: tuple[str, ...]) -> str:
    shares = ", ".join(f"{k} {v:.0%}" for k, v in result.scripts.items()) or "no letters"
    return f"script: mostly {result.dominant_script or 'no letters'} ({shares}), not in --scripts {','.join(scripts)}"


def tokenize_unit(reader: UnitReader, result: UnitResult, context: UnitContext, clock: StageClock,
                  writer: PartWriter | MemberWriter | None = None) -> UnitResult:
    """The second pass: rows into the unit's parts (or its group's: `writer`), then the [UNK] gate."""
    counts = result.counts
    if writer is None:
        writer = PartWriter(context.temp_dir, reader.unit.source, context.layout, context.id_dtype, context.config)
    # Text inputs get their signature in the first pass; records here, once their joined size is known.
    signature = MinHasher(reader.scanned.joined_bytes, seed=SIGNATURE_SEED) if not result.signature else None
    try:
        _write_rows(reader, context, writer, signature, counts)
    except DocumentTooLong as error:  # an input, not a failure: skipped with the reason
        writer.abort()
        return _gated(result, str(error))
    except BaseException:
        writer.abort()
        raise
    if signature is not None:
        result.signature = signature.signature().tobytes().hex()
    clock.lap(STAGE_TOKENIZE)
    return finish_parts(result, writer, context.config, clock)


def finish_parts(result: UnitResult, writer: PartWriter | MemberWriter, config: PreprocessConfig,
                 clock: StageClock | None = None) -> UnitResult:
    """Close the unit's parts, or delete them when the [UNK] gate keeps the unit out."""
    counts = result.counts
    result.unk_fraction = round(counts[m.UNK_TOKENS] / counts[m.TOKENS], 4) if counts[m.TOKENS] else 0.0
    if counts[m.TOKENS] and counts[m.UNK_TOKENS] / counts[m.TOKENS] > config.max_unk_fraction:
        writer.abort()
        return _gated(result, f"[UNK] gate: {counts[m.UNK_TOKENS] / counts[m.TOKENS]:.1%} of its "
                              f"{counts[m.TOKENS]:,} tokens are [UNK] for tokenizer {config.tokenizer} "
                              f"(--max_unk_fraction {config.max_unk_fraction})")
    result.parts = writer.close()
    result.part_starts = dict(writer.starts)
    if clock is not None:
        clock.lap(STAGE_WRITE_PARTS)
    return result


def _gated(result: UnitResult, reason: str) -> UnitResult:
    """A unit a quality gate keeps out: skipped with the reason, contributing no rows or tokens."""
    kept = (m.FILES_READ, m.DOCUMENTS, m.CHARACTERS, m.REPLACED_BYTES, m.BOILERPLATE_CHARS_REMOVED,
            m.RECORDS_SKIPPED)
    result.counts = {name: (value if name in kept else 0) for name, value in result.counts.items()}
    result.counts[m.FILES_SKIPPED] = result.counts[m.FILES_READ]
    result.skip_reason = reason
    result.parts = {}
    result.part_starts = {}
    return result


def _write_rows(reader: UnitReader, context: UnitContext, writer: PartWriter, signature: MinHasher | None,
                counts: dict[str, int]) -> None:
    """The second pass: tokenize each document's pieces and cut rows as `--packing` says."""
    sentences = context.config.packing == PACKING_SENTENCES
    concat = context.config.packing == PACKING_CONCAT and not sentences
    shared = new_row_stream(reader.scanned.key, context) if concat else None
    for index, (digest, pieces) in enumerate(reader.documents()):
        stream, key = shared if concat else new_row_stream(digest, context)
        if index and signature is not None:
            signature.update(b"\n")
        if index and concat:  # [SEP] between documents: not a content token
            writer.add(stream.add(np.array([context.layout.sep_id], dtype=np.int32)), stream, key)
            counts[m.TOKENS] -= 1
        _write_document(pieces, DocumentEncoder(context.encoder_tokenizer, sentences), context.layout, stream, key,
                        writer, signature, counts)
        if not concat:
            finish_stream(stream, key, writer, counts)
    if concat:
        finish_stream(*shared, writer, counts)


def _write_document(pieces: Iterator[str], encoder: DocumentEncoder, layout: RowLayout, stream: RowStream,
                    key: np.uint64, writer: PartWriter, signature: MinHasher | None, counts: dict[str, int]) -> None:
    """One document's pieces through its own encoder into the row stream: a piece ends anywhere, so
    the encoder holds back what follows the piece's last safe cut (and the sentence in progress)
    and puts it before the next piece."""
    for piece in pieces:
        if signature is not None:
            signature.update(piece.encode("utf-8", "surrogatepass"))
        tokens, lengths = encoder.feed(piece)
        counts[m.UNK_TOKENS] += int((tokens == layout.unk_id).sum())
        writer.add(stream.add(tokens, nonzero_lengths(lengths)), stream, key)
    tokens, lengths = encoder.finish()
    counts[m.UNK_TOKENS] += int((tokens == layout.unk_id).sum())
    writer.add(stream.add(tokens, nonzero_lengths(lengths)), stream, key)


def new_row_stream(digest: str, context: UnitContext) -> tuple[RowStream, np.uint64]:
    """The row stream of one document (or, with --packing concat, of a unit) and its content key."""
    config, layout = context.config, context.layout
    sentences = config.packing == PACKING_SENTENCES
    key = digest_to_u64(digest)
    targets = (lambda n: short_row_targets(key, n, config.short_seq_prob, layout.content_len)) if sentences else None
    return RowStream(layout, context.id_dtype, sentences=sentences, short_targets=targets), key


def finish_stream(stream: RowStream, key: np.uint64, writer: PartWriter, counts: dict[str, int]) -> None:
    """The stream's last row into the writer, and the stream's tokens and rows into the counts."""
    last = stream.finish()
    writer.add(last, stream, key)
    counts[m.TOKENS] += stream.tokens
    counts[m.TOKENS_DROPPED] += last.dropped_tokens
    counts[m.SHORT_ROWS_DROPPED] += int(last.dropped_tokens > 0)
    counts[m.DOCUMENTS_TOO_SHORT] += int(stream.rows == 0)
    counts[m.ROWS] += stream.rows
