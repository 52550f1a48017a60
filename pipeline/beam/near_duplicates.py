"""Near-duplicate inputs: candidate pairs from MinHash bands bucketed through a GroupByKey (only
small records cross the shuffle: a band hash and a path), then the similarity of each candidate
from the two signatures, clusters and (with --near_dedup) the later members dropped.

An input is a file: the byte ranges of a split file are never compared with each other; their
signatures are merged (the value-wise minimum, which is the signature of the union of their
bigrams up to the few bigrams that span a range end) and the file is kept or dropped whole. A text
of fewer than two words has no bigram and resembles nothing.

Everything depends on content and paths only, so the pairs and the drops are the same for any
worker count, runner or input order.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
from apache_beam.transforms.combiners import ToListCombineFn

from pipeline.beam.duplicates import by_input, dropped_result
from pipeline.beam.unit_results import UnitResult
from pipeline.kernels.quality import band_hashes, is_empty_signature, signature_similarity
from schemas import manifest as m

REPORT_SIMILARITY = 0.5  # pairs at or above this estimated similarity are always reported
MAX_BAND_GROUP = 64  # a band shared by more inputs pairs each with the first only (clusters still join)


def _signature(result: UnitResult) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(result.signature), dtype=np.uint64)


def input_signature(parts: Iterable[UnitResult]) -> np.ndarray | None:
    """The signature of an input from its results (a split file's ranges merged); None when a part
    was skipped or it has no bigram."""
    parts = list(parts)
    if any(p.skip_reason is not None for p in parts):
        return None
    signatures = [_signature(p) for p in parts if p.signature]
    signatures = [s for s in signatures if not is_empty_signature(s)]
    if not signatures:
        return None
    return np.minimum.reduce(signatures) if len(signatures) > 1 else signatures[0]


def _content(parts: Iterable[UnitResult]) -> str:
    """An input's content keys (a split file's ranges in order): equal for exact duplicates."""
    return "|".join(p.key for p in parts)


def band_records(name_and_parts: tuple[str, Iterable[UnitResult]]) -> list[tuple[int, tuple[str, str]]]:
    """(band hash, (input, its content keys)) for each band of a kept input's signature."""
    name, parts = name_and_parts
    parts = sorted(parts, key=lambda p: p.source)  # a split file's ranges in order, as `by_input` gives them
    signature = input_signature(parts)
    member = (name, _content(parts))
    return [] if signature is None else [(h, member) for h in band_hashes(signature)]


def candidate_pairs(members: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Pairs (earlier path, later path) of the inputs sharing one band, but for exact duplicates
    (equal content keys: reported as such, never scored, and 45 pairs a band for 10 copies)."""
    content = dict(members)
    ordered = sorted(content)
    if len(ordered) > MAX_BAND_GROUP:
        pairs = [(ordered[0], other) for other in ordered[1:]]
    else:
        pairs = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]]
    return [(a, b) for a, b in pairs if content[a] != content[b]]


class FindNearDuplicateCandidates(beam.PTransform):
    """UnitResult -> one sorted list of candidate pairs (earlier input, later input)."""

    def expand(self, unit_results):
        return (
            unit_results
            | "ByInput" >> beam.Map(lambda r: (r.input, r))
            | "GroupInputs" >> beam.GroupByKey()
            | "BandRecords" >> beam.FlatMap(band_records)
            | "GroupBands" >> beam.GroupByKey()
            | "PairsInBand" >> beam.FlatMap(lambda kv: candidate_pairs(kv[1]))
            | "DistinctPairs" >> beam.Distinct()
            | "CollectPairs" >> beam.CombineGlobally(ToListCombineFn())
            | "SortPairs" >> beam.Map(sorted)
        )


def _input_signatures(results: list[UnitResult]) -> dict[str, tuple[np.ndarray, str]]:
    """input -> (its signature, its first part's content key) for the inputs that have one."""
    out = {}
    for name, parts in by_input(results).items():
        signature = input_signature(parts)
        if signature is not None:
            out[name] = (signature, _content(parts))
    return out


def score_pairs(results: list[UnitResult], pairs: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
    """(earlier, later, estimated similarity) of the candidates at or above REPORT_SIMILARITY;
    inputs of identical content are exact duplicates, reported as such, not here."""
    inputs = _input_signatures(results)
    scored = []
    for a, b in sorted(pairs):
        if a not in inputs or b not in inputs or inputs[a][1] == inputs[b][1]:
            continue
        similarity = signature_similarity(inputs[a][0], inputs[b][0])
        if similarity >= REPORT_SIMILARITY:
            scored.append((a, b, round(similarity, 4)))
    return scored


def mark_near_duplicates(results: list[UnitResult], pairs: list[tuple[str, str]],
                         threshold: float | None) -> tuple[list[UnitResult], list[dict]]:
    """Report every scored pair; with `threshold` (--near_dedup), every input of a cluster of pairs
    at or above it but the earliest (by path) is skipped (all its ranges), naming that earliest
    input, which is kept, and its similarity to it.

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

    for a, b, similarity in scored:
        if similarity < threshold:
            continue
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    inputs = _input_signatures(results)
    out = []
    for result in results:
        kept = root(result.input)
        if kept != result.input and result.skip_reason is None:
            similarity = round(signature_similarity(inputs[result.input][0], inputs[kept][0]), 4)
            result = dropped_result(result, f"near duplicate of {kept} (similarity {similarity:.2f}, "
                                      f"--near_dedup {threshold})", near_duplicate_of=kept, similarity=similarity)
        out.append(result)
    return out, report
