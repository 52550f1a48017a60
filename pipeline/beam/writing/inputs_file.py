"""The output's per-input records (schemas.manifest.INPUTS_FILE) without one element holding them all.

Workers turn unit results into lines (`unit_entries`); the lines go by a hash of their text into
INPUT_BUCKETS buckets, and each bucket is sorted and written as one run to the temp folder
(`write_run`, named by its bucket: a retry writes the same file); the finalize step merges the
sorted runs, a line at a time, into the one file (`merge_runs`) and records its size, sha256 and
lines per section in the manifest. Memory is a bucket's lines (1/INPUT_BUCKETS of them) per worker
and one line per run at the merge; the file's bytes are those of a sort of every line, whatever the
runs were.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import posixpath
import zlib
from collections.abc import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.arrow_io import partial_name, publish_file, write_chunks
from schemas import manifest as m

INPUT_BUCKETS = 256  # runs at most: 1,000,000 inputs are runs of ~4,000 lines (~1.2 MB), 256 files merged
RUN_PREFIX = "inputs-run-"  # in TEMP_DIR: a sorted run of INPUTS_FILE lines
NEAR_RUNS = "near-"  # the kind of the near-duplicate report's runs (`write_run`)
_BLOCK = 1 << 20


def boilerplate_share(counts: dict[str, int]) -> float:
    """Share of an input's characters cut as Project Gutenberg header and licence."""
    removed = counts.get(m.BOILERPLATE_CHARS_REMOVED, 0)
    return round(removed / max(removed + counts.get(m.CHARACTERS, 0), 1), 4)


def _quality(u: UnitResult) -> dict:
    """The per-input quality figures: [UNK] fraction, script mix, dominant script."""
    return {m.KEY_UNK_FRACTION: u.unk_fraction, m.KEY_SCRIPTS: u.scripts, m.KEY_DOMINANT_SCRIPT: u.dominant_script}


def unit_entries(u: UnitResult) -> list[tuple[str, dict]]:
    """(section, entry) of one unit result: its entry in `inputs` (read) or `skipped` (with its
    reason), and in `duplicates` when its content equals an earlier input's."""
    if u.skip_reason is not None:
        entries = [(m.KEY_SKIPPED, {m.KEY_PATH: u.source, m.KEY_SIZE: u.size, m.KEY_REASON: u.skip_reason,
                                    **_quality(u)})]
    else:
        entries = [(m.KEY_INPUTS, {
            m.KEY_PATH: u.source, m.KEY_SIZE: u.size, "content_sha256": u.key, m.KEY_ROWS: u.counts.get(m.ROWS, 0),
            m.TOKENS: u.counts.get(m.TOKENS, 0), m.UNK_TOKENS: u.counts.get(m.UNK_TOKENS, 0),
            m.RECORDS_SKIPPED: u.records_skipped,
            m.BOILERPLATE_CHARS_REMOVED: u.counts.get(m.BOILERPLATE_CHARS_REMOVED, 0),
            m.KEY_BOILERPLATE_SHARE: boilerplate_share(u.counts), **_quality(u)})]
    if u.duplicate_of:
        entries.append((m.KEY_DUPLICATES, {m.KEY_PATH: u.source, m.KEY_DUPLICATE_OF: u.duplicate_of}))
    return entries


def sortable_line(section: str, entry: dict) -> tuple[tuple, str]:
    """(its place in the file, the line)."""
    return m.input_line_order(section, entry), m.input_line(section, entry)


def _line_order(line: bytes) -> tuple:
    entry = json.loads(line)
    return m.input_line_order(entry.pop(m.KEY_SECTION), entry)


def input_bucket(line: str, buckets: int = INPUT_BUCKETS) -> int:
    """The bucket of a line: a hash of its text (the same in every process, unlike `hash`)."""
    return zlib.crc32(line.encode("ascii")) % buckets


def write_run(temp_dir: str, bucket: int, lines: list[tuple[tuple, str]], kind: str = "") -> str:
    """Write the lines of `bucket` sorted as one run in `temp_dir`; returns its path. `kind` names
    runs of another stream of lines (the near-duplicate report's) apart from the inputs' runs of the
    same bucket: any set of sorted runs merges into the same file."""
    path = posixpath.join(temp_dir, f"{RUN_PREFIX}{kind}{bucket:05d}.jsonl")
    ordered = [line for _, line in sorted(lines)]
    write_chunks(path, ("".join(ordered[start:start + 1000]).encode("ascii") for start in range(0, len(ordered), 1000)))
    return path


def _run_lines(path: str) -> Iterator[bytes]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        yield from m.handle_lines(handle)


def merge_runs(runs: Iterable[str], path: str) -> dict:
    """Merge sorted runs into INPUTS_FILE at `path` (locally under a temp name, then renamed); returns
    the manifest's record of it: file name, bytes, sha256, lines per section. The runs are deleted."""
    runs = sorted(set(runs))
    temp = partial_name(path)
    digest, size, lines = hashlib.sha256(), 0, dict.fromkeys(m.INPUT_SECTIONS, 0)
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        buffer: list[bytes] = []
        for line in heapq.merge(*(_run_lines(run) for run in runs), key=_line_order):
            lines[json.loads(line)[m.KEY_SECTION]] += 1
            buffer.append(line)
            if len(buffer) >= 1000:
                _write(handle, buffer, digest)
                size += sum(map(len, buffer))
                buffer.clear()
        _write(handle, buffer, digest)
        size += sum(map(len, buffer))
    publish_file(temp, path)
    if runs:
        FileSystems.delete(runs)
    return {m.KEY_FILENAME: m.INPUTS_FILE, m.KEY_BYTES: size, m.KEY_SHA256: digest.hexdigest(), m.KEY_LINES: lines}


def _write(handle, buffer: list[bytes], digest) -> None:
    block = b"".join(buffer)
    digest.update(block)
    handle.write(block)


def read_entries(folder: str, manifest: dict) -> Iterator[tuple[str, dict]]:
    """(section, entry) of every per-input record of the manifest found in `folder` (an output, or
    the temp folder of a run that made no rows), streamed and checked (schemas.manifest.input_entries)."""
    path = posixpath.join(folder, m.INPUTS_FILE)
    lines = _run_lines(path) if m.KEY_INPUTS_FILE in manifest and FileSystems.exists(path) else None
    return m.input_entries(manifest, lines)


def section_entries(entries: Iterable[tuple[str, dict]], section: str) -> Iterator[dict]:
    return (entry for name, entry in entries if name == section)
