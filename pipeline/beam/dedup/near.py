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

from pipeline.beam.dedup.exact import by_input, dropped_result
from pipeline.beam.unit_results import UnitResult
from pipeline.kernels.text.quality import band_hashes, is_empty_signature, signature_similarity
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


BAND_GROUPS = 4096  # band hashes are grouped by their remainder: a shuffle key per 4,096, not per band


def _in_band_group(record: tuple[int, tuple[str, str]]) -> tuple[int, tuple[int, tuple[str, str]]]:
    return record[0] % BAND_GROUPS, record


def _pairs_in_bands(group: tuple[int, Iterable[tuple[int, tuple[str, str]]]]) -> list[tuple[str, str]]:
    """The candidate pairs of every band of one group (each band's members alone)."""
    bands: dict[int, list[tuple[str, str]]] = {}
    for band, member in group[1]:
        bands.setdefault(band, []).append(member)
    return [pair for band in sorted(bands) for pair in candidate_pairs(bands[band])]


class FindNearDuplicateCandidates(beam.PTransform):
    """(input, its results) -> the candidate pairs (earlier input, later input), each once. (The local
    runner holds a shuffle in memory, at a few hundred bytes a key: 64 band keys an input were most
    of the job's memory on many small files.)"""

    def expand(self, inputs):
        return (
            inputs
            | "BandRecords" >> beam.FlatMap(band_records)
            | "InBandGroups" >> beam.Map(_in_band_group)
            | "GroupBands" >> beam.GroupByKey()
            | "PairsInBand" >> beam.FlatMap(_pairs_in_bands)
            | "DistinctPairs" >> beam.Distinct()
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


# The job's form of `score_pairs` and `mark_near_duplicates`: joins by input, so that no step holds
# more than one input's results, one pair, or the (small) list of pairs at or above --near_dedup.


def signature_record(name_and_parts: tuple[str, list[UnitResult]]) -> list[tuple[str, tuple[np.ndarray, str]]]:
    """(input, (its signature, its content keys)) of an input that has a signature."""
    name, parts = name_and_parts
    signature = input_signature(parts)
    return [] if signature is None else [(name, (signature, _content(parts)))]


def _with_earlier(joined) -> list[tuple[str, tuple[str, np.ndarray, str]]]:
    """(later, (earlier, earlier's signature, its content)) of the pairs of an earlier input."""
    earlier, group = joined
    signatures = list(group["signature"])
    if not signatures:
        return []
    signature, content = signatures[0]
    return [(later, (earlier, signature, content)) for later in sorted(set(group["later"]))]


def _scored(joined) -> list[tuple[str, str, float]]:
    """(earlier, later, similarity) of the pairs of a later input, at or above REPORT_SIMILARITY."""
    later, group = joined
    signatures = list(group["signature"])
    if not signatures:
        return []
    signature, content = signatures[0]
    out = []
    for earlier, other, other_content in sorted(group["earlier"], key=lambda e: e[0]):
        if other_content == content:
            continue
        similarity = signature_similarity(other, signature)
        if similarity >= REPORT_SIMILARITY:
            out.append((earlier, later, round(similarity, 4)))
    return out


def cluster_roots(edges: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(member, root) for every member of a cluster of pairs but its root, the earliest by path."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for a, b in sorted(edges):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [(member, root(member)) for member in sorted(parent) if root(member) != member]


def _with_root(joined) -> list[tuple[str, tuple[str, np.ndarray]]]:
    """(member, (root, root's signature)) of the members of one root's cluster."""
    root, group = joined
    signatures = list(group["signature"])
    return [(member, (root, signatures[0][0])) for member in sorted(set(group["members"]))] if signatures else []


def drop_near(joined, threshold: float) -> list[UnitResult]:
    """An input's results, skipped as a near duplicate of its cluster's root where it has one."""
    name, group = joined
    parts = [part for parts in group["parts"] for part in parts]
    roots = list(group["root"])
    if not roots:
        return parts
    kept, root_signature = roots[0]
    signature, _ = next(iter(group["signature"]))
    similarity = round(signature_similarity(signature, root_signature), 4)
    return [dropped_result(result, f"near duplicate of {kept} (similarity {similarity:.2f}, --near_dedup "
                                   f"{threshold})", near_duplicate_of=kept, similarity=similarity)
            if result.skip_reason is None else result
            for result in parts]


class MarkNearDuplicates(beam.PTransform):
    """(input, its results), (input, (its signature, its content keys)) of the inputs that have one,
    and candidate pairs -> (the results, near duplicates dropped with `threshold`; the report entries
    {path, near_duplicate_of, similarity}), as `mark_near_duplicates` gives them. The results need
    no signature: only the signature records carry them."""

    def __init__(self, threshold: float | None) -> None:
        super().__init__()
        self._threshold = threshold

    def expand(self, inputs_and_pairs):
        inputs, signatures, pairs = inputs_and_pairs
        with_earlier = ({"signature": signatures, "later": pairs} | "JoinEarlier" >> beam.CoGroupByKey()
                        | "WithEarlier" >> beam.FlatMap(_with_earlier))
        scored = ({"signature": signatures, "earlier": with_earlier} | "JoinLater" >> beam.CoGroupByKey()
                  | "Score" >> beam.FlatMap(_scored))
        report = scored | "Report" >> beam.Map(
            lambda s: {m.KEY_PATH: s[1], m.KEY_NEAR_DUPLICATE_OF: s[0], m.KEY_SIMILARITY: s[2]})
        results = inputs | "Results" >> beam.FlatMap(lambda kv: kv[1])
        if self._threshold is None:
            return results, report
        threshold = self._threshold
        members = (
            scored
            | "AtThreshold" >> beam.Filter(lambda s: s[2] >= threshold)
            | "EdgesTogether" >> beam.Map(lambda s: (None, (s[0], s[1])))
            | "GroupEdges" >> beam.GroupByKey()
            | "Clusters" >> beam.FlatMap(lambda kv: cluster_roots(kv[1]))
            | "ByRoot" >> beam.Map(lambda member_root: (member_root[1], member_root[0]))
        )
        roots = ({"signature": signatures, "members": members} | "JoinRoots" >> beam.CoGroupByKey()
                 | "WithRoot" >> beam.FlatMap(_with_root))
        dropped = ({"parts": inputs, "root": roots, "signature": signatures}
                   | "JoinInputs" >> beam.CoGroupByKey()
                   | "DropNear" >> beam.FlatMap(drop_near, threshold=threshold))
        return dropped, report
