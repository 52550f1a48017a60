"""Input splits: a large uncompressed text input tokenized by many workers, with the rows of the
unsplit run.

An input split is one part of one text document, cut by the worker that scans it (unlike a line
range of a large `.jsonl` file, `reading.byte_ranges`, which is a work unit of its own, cut when the
file is listed). One worker scans the input: its content key, counts, signature and its splits of
about `--split_bytes`, which start and end at piece boundaries, with the Gutenberg stripper's state
at each start (`text_stream.ByteRange`). The splits are cleaned and tokenized in parallel into token
files; then one worker stitches the rows in document order, so a row may hold the end of one split
and the start of the next and chunk boundaries stay every L-2 tokens from the document's start.
Rows, keys and seeds are those of the unsplit run; the stitch only reads ids back (4 bytes a token),
the tokenizing is spread.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.byte_ranges import blocks_after, exact_blocks
from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import WorkUnit
from pipeline.beam.unit_results import UnitResult, load_result, save_result, unit_file_stem
from pipeline.beam.units import (
    StageClock,
    UnitContext,
    check_unchanged,
    finish_parts,
    finish_stream,
    new_row_stream,
    scan_unit,
    tokenize_unit,
)
from pipeline.beam.writing.arrow_io import partial_name, publish_file
from pipeline.beam.writing.part_writer import PartWriter
from pipeline.kernels.rows.chunking import RowStream
from pipeline.kernels.text.text_stream import ByteRange, GutenbergStripper, RawTextStats, decoded_pieces
from pipeline.tokenizer.cut_rule import CutRule
from pipeline.tokenizer.encode import DocumentEncoder, first_resume_point, nonzero_lengths
from schemas import manifest as m
from schemas.options import PACKING_SENTENCES

TOKEN_DTYPE = np.dtype("<i4")


@dataclass
class SplitTask:
    """One input split to tokenize (`index` of `count`): its bytes of the input and stripper state
    (`byte_range`), with what the scan found (the partial result)."""

    unit: WorkUnit
    index: int
    count: int
    byte_range: ByteRange
    strip: bool
    piece_bytes: int
    result: UnitResult

    @property
    def source(self) -> str:
        return f"{self.unit.source}#bytes={self.byte_range.start}-{self.byte_range.stop}"

    @property
    def size(self) -> int:
        return self.byte_range.stop - self.byte_range.start


@dataclass
class SplitTokens:
    """A tokenized input split: its ids (and sentence lengths) in a temp file."""

    task: SplitTask
    tokens_path: str  # "" when the split holds no text (boilerplate or whitespace only)
    tokens: int
    unk_tokens: int


def scan_for_splits(unit: WorkUnit, context: UnitContext, clock: StageClock) -> UnitResult | list[SplitTask]:
    """Scan an input marked for splitting: its input splits to tokenize, or its result when it is
    done (an earlier run), skipped, gated, or not splittable after all (UTF-16, one split), in
    which case this worker tokenizes it whole."""
    config = context.config
    done = load_result(context.temp_dir, unit)
    if done is not None:
        return done
    reader = UnitReader(unit, config.text_column, config.keep_boilerplate, split_bytes=unit.split_bytes)
    result, scan = scan_unit(reader, config, clock)
    if result.skip_reason is None and scan.skip_reason is None and len(scan.splits) < 2:
        result = check_unchanged(unit, tokenize_unit(reader, result, context, clock))
    if result.skip_reason is not None or scan.skip_reason is not None or len(scan.splits) < 2:
        save_result(context.temp_dir, unit, result)
        return result
    return [SplitTask(unit=unit, index=i, count=len(scan.splits), byte_range=r, strip=scan.strip,
                      piece_bytes=reader.piece_bytes, result=result) for i, r in enumerate(scan.splits)]


def _split_file(temp_dir: str, task: SplitTask) -> str:
    return f"{unit_file_stem(temp_dir, task.unit.source)}-split{task.index:05d}.ids"


def _split_texts(task: SplitTask) -> Iterator[tuple[str, bool]]:
    """The clean text from the split's start to the input's end, piece by piece, each with whether
    it lies in the split: the split read as the unsplit run reads it, then what follows, read as the
    next splits read it (the stripper goes on where the split leaves it)."""
    r = task.byte_range
    stripper = GutenbergStripper(r.strip_state) if task.strip else None
    own = decoded_pieces(exact_blocks(task.unit.source, r.start, r.stop), RawTextStats(), task.piece_bytes,
                         at_start=r.start == 0)
    after = decoded_pieces(blocks_after(task.unit.source, r.stop), RawTextStats(), task.piece_bytes,
                           at_start=False)
    for pieces, inside in ((own, True), (after, False)):
        for piece in pieces:
            text = "".join(stripper.feed(piece)) if stripper is not None else piece
            if text:
                yield text, inside
    held = "".join(stripper.feed("", final=True)) if stripper is not None else ""
    if held:  # an unfinished last line that might have been a marker line: the input's end, which
        # lies in the last split (lookahead for any other: taken as such, the last split dropped the
        # end of a last line such as `*** START OF ...` kept inside a body, after its `***`)
        yield held, task.index == task.count - 1


def _owned_text(task: SplitTask, rule: CutRule) -> Iterator[str]:
    """The text this split tokenizes: from the first resume point after its start to the first
    resume point after its end (`encode.first_resume_point`: cuts where the tokenizer cuts and no
    sentence end straddles), so every split starts and ends where the document can be cut. The
    first split starts at the document's start; a split holding no resume point owns nothing."""
    buffer = ""  # text not yet handed out: before the split's first resume point, and the lookahead
    start_found = task.index == 0
    stop_offset = -1  # where the split's end lies in `buffer`, once the split's own text has ended
    for text, inside in _split_texts(task):
        if inside and start_found:
            yield text
            continue
        if not inside and stop_offset < 0:
            stop_offset = len(buffer)
        buffer += text
        if not start_found:
            found = first_resume_point(buffer, rule)
            if found < 0:
                continue
            start_found = True
            begin = found + rule.skip  # a cut character of a dropping rule belongs to neither split
            if stop_offset < 0:
                yield buffer[begin:]
                buffer = ""
                continue
            if found > stop_offset:
                return  # the first resume point lies beyond the split: the previous split takes it all
            buffer, stop_offset = buffer[begin:], max(stop_offset - begin, 0)
        end = first_resume_point(buffer, rule, stop_offset + 1)
        if end >= 0:
            yield buffer[:end]
            return
    if start_found and buffer:
        yield buffer  # the input ended in the lookahead: the document's end is this split's


def tokenize_split(task: SplitTask, context: UnitContext) -> SplitTokens:
    """Clean and tokenize one split as the unsplit run cleans that part of the input, cut where
    the document can be cut (`_owned_text`); the sentence open at its end is left open (its ids
    have no length) and the stitch joins it to the next split's first sentence."""
    sentences = context.config.packing == PACKING_SENTENCES
    encoder = DocumentEncoder(context.encoder_tokenizer, sentences, open_sentence=task.index > 0)
    out = SplitTokens(task=task, tokens_path="", tokens=0, unk_tokens=0)
    handle, temp = None, ""  # opened at the first ids: an object store refuses an empty upload
    try:
        def results() -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
            for text in _owned_text(task, encoder.rule):
                yield encoder.feed(text)
            yield encoder.finish(last_sentence=False)

        for tokens, lengths in results():
            lengths = np.zeros(0, dtype=TOKEN_DTYPE) if lengths is None else lengths
            if not tokens.shape[0] and not lengths.shape[0]:
                continue
            if handle is None:  # under a name of its own until whole (a split run again rewrites it)
                out.tokens_path = _split_file(context.temp_dir, task)
                temp = partial_name(out.tokens_path)
                handle = FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED)
            # a record per piece: its token and sentence counts, its ids, its sentence lengths
            handle.write(np.asarray([tokens.shape[0], lengths.shape[0]], dtype=TOKEN_DTYPE).tobytes())
            handle.write(tokens.astype(TOKEN_DTYPE).tobytes())
            handle.write(lengths.astype(TOKEN_DTYPE).tobytes())
            out.tokens += int(tokens.shape[0])
            out.unk_tokens += int((tokens == context.layout.unk_id).sum())
    finally:
        if handle is not None:
            handle.close()
    if handle is not None:
        publish_file(temp, out.tokens_path)
    return out


def _read_split(path: str, sentences: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The ids and (with `sentences`) sentence lengths a split's file holds."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        data = np.frombuffer(handle.read(), dtype=TOKEN_DTYPE)
    ids, lengths = [], []
    position = 0
    while position < data.shape[0]:
        n_tokens, n_lengths = int(data[position]), int(data[position + 1])
        position += 2
        ids.append(data[position: position + n_tokens])
        lengths.append(data[position + n_tokens: position + n_tokens + n_lengths])
        position += n_tokens + n_lengths
    return np.concatenate(ids), (np.concatenate(lengths) if sentences else None)


def stitch_splits(splits: list[SplitTokens], context: UnitContext) -> UnitResult:
    """The rows of a split input from its tokenized splits, in document order, into its parts."""
    splits = sorted(splits, key=lambda t: t.task.index)
    first = splits[0].task
    written = [t.tokens_path for t in splits if t.tokens_path]
    config, temp_dir = context.config, context.temp_dir
    done = load_result(temp_dir, first.unit)
    if done is not None:  # a retried stitch (at-least-once runners retry bundles): its saved result
        _delete_existing(written)
        return done
    if [t.task.index for t in splits] != list(range(first.count)):
        raise RuntimeError(f"{first.unit.source}: {len(splits)} of its {first.count} splits arrived")
    result = copy.deepcopy(first.result)
    counts = result.counts
    writer = PartWriter(temp_dir, first.unit.source, context.layout, context.id_dtype, config)
    stream, key = new_row_stream(result.key, context)
    try:
        _stitch_rows(splits, config.packing == PACKING_SENTENCES, stream, key, writer, counts)
    except BaseException:
        writer.abort()
        raise
    result = check_unchanged(first.unit, finish_parts(result, writer, config))
    save_result(temp_dir, first.unit, result)
    _delete_existing(written)
    return result


def _stitch_rows(splits: list[SplitTokens], sentences: bool, stream: RowStream, key: np.uint64, writer: PartWriter,
                 counts: dict[str, int]) -> None:
    """Each split's ids, in order, into the input's row stream; with `sentences`, the sentence a
    split leaves open is joined to the next split's first."""
    open_ids = np.zeros(0, dtype=TOKEN_DTYPE)  # the sentence left open by the splits so far
    for tokens in splits:
        if not tokens.tokens_path:
            continue  # a split of boilerplate or whitespace only, or without a place to cut
        ids, lengths = _read_split(tokens.tokens_path, sentences)
        counts[m.UNK_TOKENS] += tokens.unk_tokens
        if sentences:
            ids = np.concatenate([open_ids, ids])
            lengths = lengths.copy()
            if lengths.shape[0]:
                lengths[0] += open_ids.shape[0]
            done = int(lengths.sum())
            ids, open_ids, lengths = ids[:done], ids[done:], nonzero_lengths(lengths)
        writer.add(stream.add(ids, lengths), stream, key)
    if open_ids.shape[0]:
        writer.add(stream.add(open_ids, np.asarray([open_ids.shape[0]])), stream, key)
    finish_stream(stream, key, writer, counts)


def _delete_existing(paths: list[str]) -> None:
    existing = [p for p in paths if FileSystems.exists(p)]
    if existing:
        FileSystems.delete(existing)
