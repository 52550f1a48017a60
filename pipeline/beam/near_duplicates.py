"""Near-duplicate inputs: candidate pairs from MinHash bands bucketed through a GroupByKey (only
small records cross the shuffle: a band hash and a path), then the similarity of each candidate
from the two signatures, clusters and (with --near_dedup) the later members dropped.

Everything depends on content and paths only, so the pairs and the drops are the same for any
worker count, runner or input order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import apache_beam as beam
import numpy as np
from apache_beam.transforms.combiners import ToListCombineFn

from pipeline.beam.units import UnitResult
from pipeline.kernels.quality import band_hashes, signature_similarity
from schemas import manifest as m

REPORT_SIMILARITY = 0.5  # pairs at or above this estimated similarity are always reported
MAX_BAND_GROUP = 64  # a band shared by more inputs pairs each with the first only (clusters still join)


def _signature(result: UnitResult) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(result.signature), dtype=np.uint64)


def band_records(result: UnitResult) -> list[tuple[int, str]]:
    """(band hash, path) for each band of a kept input's signature."""
    if result.skip_reason is not None or not result.signature:
        return []
    return [(h, result.source) for h in band_hashes(_signature(result))]


def candidate_pairs(members: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs (earlier path, later path) of the inputs sharing one band."""
    ordered = sorted(set(members))
    if len(ordered) > MAX_BAND_GROUP:
        return [(ordered[0], other) for other in ordered[1:]]
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]]


class FindNearDuplicateCandidates(beam.PTransform):
    """UnitResult -> one sorted list of candidate pairs (earlier path, later path)."""

    def expand(self, unit_results):
        return (
            unit_results
            | "BandRecords" >> beam.FlatMap(band_records)
            | "GroupBands" >> beam.GroupByKey()
            | "PairsInBand" >> beam.FlatMap(lambda kv: candidate_pairs(kv[1]))
            | "DistinctPairs" >> beam.Distinct()
            | "CollectPairs" >> beam.CombineGlobally(ToListCombineFn())
            | "SortPairs" >> beam.Map(sorted)
        )


def score_pairs(results: list[UnitResult], pairs: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
    """(earlier, later, estimated similarity) of the candidates at or above REPORT_SIMILARITY;
    inputs of identical content are exact duplicates, reported as such, not here."""
    by_source = {r.source: r for r in results if r.skip_reason is None and r.signature}
    scored = []
    for a, b in sorted(pairs):
        if a not in by_source or b not in by_source or by_source[a].key == by_source[b].key:
            continue
        similarity = signature_similarity(_signature(by_source[a]), _signature(by_source[b]))
        if similarity >= REPORT_SIMILARITY:
            scored.append((a, b, round(similarity, 4)))
    return scored


def mark_near_duplicates(results: list[UnitResult], pairs: list[tuple[str, str]],
                         threshold: float | None) -> tuple[list[UnitResult], list[dict]]:
    """Report every scored pair; with `threshold` (--near_dedup), every input of a cluster of pairs
    at or above it but the earliest (by path) is skipped, naming its most similar partner.

    Returns:
        (the results, the report: one entry per pair {path, near_duplicate_of, similarity}).
    """
    scored = score_pairs(results, pairs)
    report = [{m.KEY_PATH: b, m.KEY_NEAR_DUPLICATE_OF: a, m.KEY_SIMILARITY: s} for a, b, s in scored]
    if threshold is None:
        return results, report
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    twins: dict[str, tuple[float, str]] = {}
    for a, b, similarity in scored:
        if similarity < threshold:
            continue
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
        for member, other in ((a, b), (b, a)):  # each member's most similar partner names its twin
            best = twins.get(member)
            if best is None or (similarity, other) > best:
                twins[member] = (similarity, other)
    out = []
    for result in results:
        if result.source in twins and root(result.source) != result.source:
            similarity, twin = twins[result.source]
            counts = dict.fromkeys(result.counts, 0)
            counts[m.FILES_READ] = result.counts.get(m.FILES_READ, 0)
            counts[m.FILES_SKIPPED] = counts[m.FILES_READ]
            result = replace(result, near_duplicate_of=twin, similarity=similarity, parts={}, counts=counts,
                             skip_reason=f"near duplicate of {twin} (similarity {similarity:.2f}, "
                                         f"--near_dedup {threshold})")
        out.append(result)
    return out, report
