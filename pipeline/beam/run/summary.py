"""The closing summary of a preprocess run, built from its manifest: what was read, skipped (the first
few inputs of each reason named) and written, how long it took, and where the manifest is."""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterable

from pipeline.beam.run.no_rows import made_rows
from pipeline.beam.writing.finalize import reason_kind
from pipeline.beam.writing.inputs_file import read_entries, section_entries
from pipeline.console import human_bytes, human_seconds
from pipeline.console.formatting import plural
from schemas import manifest as m

NAMED_PER_REASON = 3  # skipped inputs named on the console per reason; INPUTS_FILE lists them all
WANTED_VALIDATION_ROWS = 3  # the advice's fraction expects this many validation rows


def record_path(manifest: dict, output: str) -> str:
    """Where the run's manifest is: the output's, or (a run that made no rows) the temp folder's record."""
    if made_rows(manifest):
        return posixpath.join(output, m.MANIFEST_FILE)
    return posixpath.join(output, m.TEMP_DIR, m.NO_ROWS_FILE)


def validation_advice(fraction: float, train_rows: int) -> str:
    """What to say when --validation_fraction drew no row: nothing when there was nothing to draw
    from; else, when one exists below 1, a larger fraction (one significant digit, rounded up) that
    expects WANTED_VALIDATION_ROWS rows."""
    if not fraction or not train_rows:
        return ""
    drew = f"--validation_fraction {fraction} of {plural(train_rows, 'row')} drew none"
    raw = WANTED_VALIDATION_ROWS / train_rows
    scale = 10.0 ** math.floor(math.log10(raw))
    wanted = float(f"{math.ceil(raw / scale - 1e-9) * scale:.1g}")
    if wanted >= 1:
        return f" ({drew}: too few rows for a validation split)"
    if wanted <= fraction:  # a draw of none at this fraction is a rare chance (splits do not follow --seed)
        return f" ({drew}, {fraction * train_rows:.1f} expected: raise it for a validation split)"
    return f" ({drew}: raise it, e.g. {wanted:g}, for a validation split)"


def summary_lines(manifest: dict, output: str, wall_seconds: float, input_bytes: int) -> list[str]:
    """The summary's lines; the skipped inputs named come from the run's INPUTS_FILE, streamed."""
    counts = manifest[m.KEY_COUNTS]
    splits = manifest[m.KEY_SPLITS]
    config = manifest.get(m.KEY_CONFIG, {})
    skipped = skipped_text(counts.get(m.FILES_SKIPPED, 0), counts.get(m.FILES_SKIPPED_BY_REASON, {}))
    written = sum(shard[m.KEY_BYTES] for info in splits.values() for shard in info[m.KEY_SHARDS])
    rate = input_bytes / max(wall_seconds, 1e-9)
    rows = ", ".join(f"{split} {info[m.KEY_ROWS]:,}" for split, info in splits.items())
    if not splits.get(m.VALIDATION, {}).get(m.KEY_ROWS):
        rows += validation_advice(config.get("validation_fraction") or 0, splits[m.TRAIN][m.KEY_ROWS])
    shards = ", ".join(f"{split} {len(info[m.KEY_SHARDS])}" for split, info in splits.items())
    files = counts.get(m.FILES_READ, 0)
    listed = m.input_line_counts(manifest)
    # A --hf_dataset is one input, as in the progress line; the files are counted as files.
    dataset = config.get("hf_dataset")
    read = f"{files + 1:,} read ({plural(files, 'file')} and --hf_dataset {dataset})" if dataset else f"{files:,} read"
    lines = [
        f"finished in {human_seconds(wall_seconds)}: {human_bytes(input_bytes)} of input at {human_bytes(rate)}/s",
        f"  inputs:    {read}, {skipped}, "
        f"{plural(listed[m.KEY_DUPLICATES], 'duplicate')}, "
        f"{plural(listed[m.KEY_NEAR_DUPLICATES], 'near-duplicate pair')}",
        *skipped_lines(manifest, output),
        f"  documents: {counts.get(m.DOCUMENTS, 0):,}; tokens: {counts.get(m.TOKENS, 0):,}",
        f"  rows:      {rows}",
        f"  shards:    {shards}; {human_bytes(written)} written",
        f"  manifest:  {posixpath.join(output, m.MANIFEST_FILE)}" if made_rows(manifest) else
        f"  manifest:  none written (no rows); what the run found: {record_path(manifest, output)}",
    ]
    return lines


def skipped_text(skipped: int, by_kind: dict[str, int]) -> str:
    """`11 skipped (1 not text: a PDF document ..., 10 ...)`: the count, and the count of each reason kind."""
    reasons = f" ({', '.join(f'{n} {kind}' for kind, n in by_kind.items())})" if by_kind else ""
    return f"{skipped:,} skipped{reasons}"


def skipped_lines(manifest: dict, output: str) -> list[str]:
    """`    skipped (REASON): a.txt, b.txt, c.txt and 4 more (all in inputs.jsonl, ...)`, per reason."""
    folder = posixpath.dirname(record_path(manifest, output))
    entries = ((entry[m.KEY_PATH], entry[m.KEY_REASON])
               for entry in section_entries(read_entries(folder, manifest), m.KEY_SKIPPED))
    if m.KEY_INPUTS_FILE in manifest:
        return named_skips(entries, posixpath.join(folder, m.INPUTS_FILE), f"section {m.KEY_SKIPPED!r}")
    return named_skips(entries, record_path(manifest, output))


def named_skips(entries: Iterable[tuple[str, str]], listed_in: str, where: str = f"key {m.KEY_SKIPPED!r}") -> list[str]:
    """Per reason kind, the first NAMED_PER_REASON skipped inputs of `entries` (path, reason) by name,
    and how many more `listed_in` holds (under `where`: a JSON file's key, INPUTS_FILE's section).
    Streams: holds NAMED_PER_REASON names a kind."""
    by_kind: dict[str, tuple[list[str], list[int]]] = {}
    for path, reason in entries:
        names, count = by_kind.setdefault(reason_kind(reason), ([], [0]))
        count[0] += 1
        if len(names) < NAMED_PER_REASON:
            names.append(posixpath.basename(path))
    lines = []
    for kind, (names, (count,)) in sorted(by_kind.items()):
        more = count - NAMED_PER_REASON
        rest = f" and {more} more (all in {listed_in}, {where})" if more > 0 else ""
        lines.append(f"    skipped ({kind}): {', '.join(names)}{rest}")
    return lines
