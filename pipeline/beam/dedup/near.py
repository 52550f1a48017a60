"""Near-duplicate inputs: candidate pairs from MinHash bands shuffled by band (`band_packs`: one
packed value an input and shuffle key), kept once by a merge of the partitions' pair files
(`pair_spills`), then the similarity of each candidate from the two signatures, read back from
where the workers left them (`signatures`: no element carries one past the worker), clusters and
(with --near_dedup) the later members dropped, looked up in the roots' table (`root_table`).

An input is a file: the byte ranges of a split file are never compared with each other; their
signatures are merged (the value-wise minimum, which is the signature of the union of their
bigrams up to the few bigrams that span a range end) and the file is kept or dropped whole. A text
of fewer than two words has no bigram and resembles nothing.

Everything depends on content and paths only, so the pairs and the drops are the same for any
worker count, runner or input order.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np

from pipeline.beam.dedup.band_packs import MAX_BAND_GROUP, candidate_pairs, pack_bands
from pipeline.beam.dedup.clusters import cluster_members
from pipeline.beam.dedup.exact import by_input, dropped_result
from pipeline.beam.dedup.pair_spills import PairSlice, read_pairs, spill_partition_pairs, unique_pairs, write_pair_file
from pipeline.beam.dedup.root_table import RootsRef, read_roots, write_roots
from pipeline.beam.dedup.signatures import IN_RESULT, read_signature, write_signature
from pipeline.beam.unit_results import UnitResult
from pipeline.beam.writing.inputs_file import NEAR_RUNS, sortable_line, write_run
from pipeline.kernels.text.quality import band_hashes, is_empty_signature, signature_similarity
from schemas import manifest as m

__all__ = ["REPORT_SIMILARITY", "MAX_BAND_GROUP", "candidate_pairs", "input_signature", "band_records", "score_pairs",
           "mark_near_duplicates", "cluster_roots", "result_bands", "input_bands", "FindNearDuplicateCandidates",
           "NearDuplicateRoots", "near_dropped", "score_bucket"]

REPORT_SIMILARITY = 0.5  # pairs at or above this estimated similarity are always reported
ROOTS_FILE = "near-duplicate-roots.bin"  # in the temp folder: the clusters' roots (`root_table`)


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


# The job's form of the above: the bands packed (`band_packs`), the pairs, report lines and edges in
# files of the temp folder (`pair_spills`), the signatures read back for the candidates only
# (`signatures`); no step holds more than one partition's bands, one chunk of pairs or lines, or one
# input's results (the clusters are found on local disk, `clusters`; the twins of --dedup and the
# roots are tables each process maps, `root_table`).


def result_bands(result: UnitResult) -> list[tuple[int, bytes]]:
    """The packed bands of a whole input's result as its worker made it: its signature stays in the
    result's record (IN_RESULT). None for a byte range's result (its file's ranges merge first)."""
    if result.file:
        raise ValueError(f"{result.source} is a byte range of {result.file}: its file's bands come from "
                         f"all its ranges (input_bands)")
    signature = input_signature([result])
    return [] if signature is None else pack_bands(result.source, _content([result]), signature, IN_RESULT)


def input_bands(name_and_parts: tuple[str, Iterable[UnitResult]], temp_dir: str) -> list[tuple[int, bytes]]:
    """The packed bands of an input from its results (a split file's ranges merged), its signature
    written to its own file in `temp_dir` first: what `band_records` gives, packed."""
    name, parts = name_and_parts
    parts = sorted(parts, key=lambda p: p.source)  # a split file's ranges in order, as `by_input` gives them
    signature = input_signature(parts)
    if signature is None:
        return []
    return pack_bands(name, _content(parts), signature, write_signature(temp_dir, name, signature))


class FindNearDuplicateCandidates(beam.PTransform):
    """(partition, packed bands) of every input -> the candidate pairs (earlier input, later input,
    their signatures' places) as (bucket, its slices of the temp folder's pair files): each bucket's
    `pair_spills.unique_pairs` are its pairs, each once, and the buckets' together are the
    `candidate_pairs` of every band's members. A partition's pairs are spilled to `temp_dir` in
    sorted chunks (`pair_spills`): the same pair made by many partitions (a content's near copies
    share nearly all their bands) is never held in the shuffle once a partition, as `beam.Distinct`
    held it, nor the pairs one each.

    Or (packs, few): the packs of the workers' stage (every partition among their keys), shuffled
    where the workers make them, and those of the few inputs packed later (files read in byte
    ranges or input splits: over --split_bytes each) as a side input of the pairing. A Flatten of
    the two would be one more copy of every input's bands on the local runner, which materialises
    every Flatten, and read back in a stage of its own: 10 KB of peak memory an input."""

    def __init__(self, temp_dir: str) -> None:
        super().__init__()
        self._temp_dir = temp_dir

    def expand(self, packs):
        few = None
        if isinstance(packs, tuple):
            packs, few = packs
        grouped = packs | "GroupBands" >> beam.GroupByKey()
        more = {} if few is None else {"more": beam.pvalue.AsList(few)}
        return (grouped
                | "PairsInPartition" >> beam.FlatMap(spill_partition_pairs, temp_dir=self._temp_dir, **more)
                | "GroupPairSlices" >> beam.GroupByKey())


def score_pair(pair: tuple[str, str, int, int], temp_dir: str) -> list[tuple[str, str, float, int, int]]:
    """(earlier, later, estimated similarity, their places) of a candidate at or above REPORT_SIMILARITY."""
    a, b, place_a, place_b = pair
    similarity = signature_similarity(read_signature(temp_dir, a, place_a), read_signature(temp_dir, b, place_b))
    return [(a, b, round(similarity, 4), place_a, place_b)] if similarity >= REPORT_SIMILARITY else []


TAG_RUN, TAG_EDGES = "run", "edges"
REPORT_CHUNK = 1 << 16  # report lines (or edges) a bucket's scoring holds before writing them


def score_bucket(bucket_and_slices: tuple[int, Iterable[PairSlice]], temp_dir: str, threshold: float | None,
                 twins: RootsRef | None = None, chunk: int = REPORT_CHUNK) -> Iterator[tuple[str, object]]:
    """One bucket of candidate pairs (`FindNearDuplicateCandidates`) scored, but those of an input
    in the table `twins` names (input -> its twin: dropped by --dedup, `twin_table`), written to the
    temp folder: (TAG_RUN, the path of a sorted run of report lines, `inputs_file.write_run`) and,
    with a `threshold`, (TAG_EDGES, a slice of the pairs at or above it), each every `chunk`."""
    bucket = bucket_and_slices[0]
    dropped = read_roots(twins) or {}
    lines: list[tuple[tuple, str]] = []
    edges: list[tuple[str, str, int, int]] = []
    runs = edge_files = 0
    for pair in unique_pairs(bucket_and_slices):
        if pair[0] in dropped or pair[1] in dropped:
            continue
        for scored in score_pair(pair, temp_dir):
            lines.append(sortable_line(m.KEY_NEAR_DUPLICATES, _report_entry(scored)))
            if threshold is not None and scored[2] >= threshold:
                edges.append(pair)
        if len(lines) >= chunk:
            yield TAG_RUN, write_run(temp_dir, bucket, lines, f"{NEAR_RUNS}{runs}-" if runs else NEAR_RUNS)
            lines, runs = [], runs + 1
        if len(edges) >= chunk:
            yield TAG_EDGES, write_pair_file(_edge_file(temp_dir, bucket, edge_files), edges)
            edges, edge_files = [], edge_files + 1
    if lines:
        yield TAG_RUN, write_run(temp_dir, bucket, lines, f"{NEAR_RUNS}{runs}-" if runs else NEAR_RUNS)
    if edges:
        yield TAG_EDGES, write_pair_file(_edge_file(temp_dir, bucket, edge_files), edges)


def _edge_file(temp_dir: str, bucket: int, index: int) -> str:
    return posixpath.join(temp_dir, f"near-edges-{bucket:03d}-{index:05d}.bin")


def root_similarity(member_root: tuple[str, str, int, int], temp_dir: str) -> tuple[str, tuple[str, float]]:
    """(member, (root, their estimated similarity))."""
    member, root, place_member, place_root = member_root
    similarity = signature_similarity(read_signature(temp_dir, member, place_member),
                                      read_signature(temp_dir, root, place_root))
    return member, (root, round(similarity, 4))


def write_root_table(key_and_edge_files: tuple[None, Iterable[PairSlice]], temp_dir: str) -> RootsRef:
    """The clusters of the edges at or above --near_dedup (`score_bucket`'s files), each member's root
    and their similarity written as one table (`root_table`) to `temp_dir`; its reference."""
    pieces = sorted(set(key_and_edge_files[1]), key=lambda piece: piece.path)
    edges = (edge for piece in pieces for edge in read_pairs(piece))
    entries = (root_similarity(member_root, temp_dir) for member_root in cluster_members(edges))
    return write_roots(posixpath.join(temp_dir, ROOTS_FILE), entries)


def near_dropped(parts: list[UnitResult], root: tuple[str, float] | None, threshold: float) -> list[UnitResult]:
    """An input's results, skipped as a near duplicate of its cluster's root `root` (root, their
    estimated similarity) where it has one."""
    if root is None:
        return parts
    kept, similarity = root
    return [dropped_result(result, f"near duplicate of {kept} (similarity {similarity:.2f}, --near_dedup "
                                   f"{threshold})", near_duplicate_of=kept, similarity=similarity)
            if result.skip_reason is None else result
            for result in parts]


def _report_entry(scored: tuple) -> dict:
    return {m.KEY_PATH: scored[1], m.KEY_NEAR_DUPLICATE_OF: scored[0], m.KEY_SIMILARITY: scored[2]}


class NearDuplicateRoots(beam.PTransform):
    """The candidate pairs (`FindNearDuplicateCandidates`: buckets of pair files) and the reference
    to the table of the exact duplicates (`twin_table`; none when there is none) -> (the roots: a
    reference (`root_table.RootsRef`) to the table of (member, (its cluster's root, their
    estimated similarity)) of every member of a cluster of pairs at or above `threshold` but its
    root, none when no pair is, or None without a threshold; the paths of the sorted runs of the
    report's lines {path, near_duplicate_of, similarity}), as `mark_near_duplicates` finds them on
    results `drop_twins` (--dedup) dropped the duplicates of. The signatures are read from
    `temp_dir` for the candidates and clusters' members only. Through the runner go only the
    files' references: the pairs, the report's lines and the clusters' edges are in the temp
    folder. The end of the job's bucket tasks get the table's reference as a side input and drop
    their inputs among its members (`near_dropped`), with no join of every input's results by
    input."""

    def __init__(self, threshold: float | None, temp_dir: str, drop_twins: bool = False) -> None:
        super().__init__()
        self._threshold = threshold
        self._temp_dir = temp_dir
        self._drop_twins = drop_twins

    def expand(self, pairs_twins):
        """`pairs_twins`: (pairs, twins), or the pairs alone without `drop_twins`."""
        pairs, twins = pairs_twins if isinstance(pairs_twins, tuple) else (pairs_twins, None)
        temp_dir, threshold = self._temp_dir, self._threshold
        # A duplicate dropped by --dedup has no signature: its pairs are not scored.
        more = {"twins": beam.pvalue.AsSingleton(twins, default_value=None)} if self._drop_twins else {}
        written = pairs | "ScoreBuckets" >> beam.FlatMap(score_bucket, temp_dir=temp_dir, threshold=threshold,
                                                           **more)
        runs = written | "ReportRuns" >> beam.FlatMap(lambda tagged: [tagged[1]] if tagged[0] == TAG_RUN else [])
        if threshold is None:
            return None, runs
        roots = (
            written
            | "EdgeFiles" >> beam.FlatMap(lambda tagged: [(None, tagged[1])] if tagged[0] == TAG_EDGES else [])
            | "GroupEdgeFiles" >> beam.GroupByKey()
            | "RootTable" >> beam.Map(write_root_table, temp_dir=temp_dir)
        )
        return roots, runs
