"""The closing summary of a preprocess run, built from its manifest: what was read, skipped and
written, how long it took, and where the manifest is."""

from __future__ import annotations

import posixpath

from pipeline.console import human_bytes, human_seconds
from schemas import manifest as m


def summary_lines(manifest: dict, output: str, wall_seconds: float, input_bytes: int) -> list[str]:
    counts = manifest[m.KEY_COUNTS]
    splits = manifest[m.KEY_SPLITS]
    by_reason = counts.get(m.FILES_SKIPPED_BY_REASON, {})
    skipped = counts.get(m.FILES_SKIPPED, 0)
    reasons = f" ({', '.join(f'{n} {reason}' for reason, n in by_reason.items())})" if by_reason else ""
    written = sum(shard[m.KEY_BYTES] for info in splits.values() for shard in info[m.KEY_SHARDS])
    rate = input_bytes / max(wall_seconds, 1e-9)
    rows = ", ".join(f"{split} {info[m.KEY_ROWS]:,}" for split, info in splits.items())
    shards = ", ".join(f"{split} {len(info[m.KEY_SHARDS])}" for split, info in splits.items())
    return [
        f"finished in {human_seconds(wall_seconds)}: {human_bytes(input_bytes)} of input at {human_bytes(rate)}/s",
        f"  inputs:    {counts.get(m.FILES_READ, 0):,} read, {skipped:,} skipped{reasons}, "
        f"{len(manifest.get(m.KEY_DUPLICATES, [])):,} duplicates, "
        f"{len(manifest.get(m.KEY_NEAR_DUPLICATES, [])):,} near-duplicate pairs",
        f"  documents: {counts.get(m.DOCUMENTS, 0):,}; tokens: {counts.get(m.TOKENS, 0):,}",
        f"  rows:      {rows}",
        f"  shards:    {shards}; {human_bytes(written)} written",
        f"  manifest:  {posixpath.join(output, m.MANIFEST_FILE)}",
    ]
