"""Deduplication treats a split file as one input, and short texts as unlike each other (issue 23
points 2 and 6)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from pipeline.beam.dedup.exact import by_input, mark_duplicates
from pipeline.beam.dedup.near import band_records, candidate_pairs, mark_near_duplicates
from pipeline.beam.reading.work_units import expand_inputs, split_large_inputs
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.units import UnitContext, process_unit
from pipeline.kernels.text.quality import MinHasher, minhash_signature, signature_similarity
from pipeline.tokenizer.fast import FastTokenizer
from pipeline.tokenizer.spec import build_tokenizer

WORDS = ("tea time river stone bread horse garden letter window candle market winter silver "
         "forest doctor music number paper summer castle").split()


def _results(paths, split_bytes, spec, tmp_path):
    config = PreprocessConfig(inputs=tuple(map(str, paths)), output=str(tmp_path / "out"), tokenizer="bert",
                              split_bytes=split_bytes)
    tokenizer = FastTokenizer(build_tokenizer(spec), spec.json)
    units = split_large_inputs(expand_inputs([str(p) for p in paths]), split_bytes)
    temp = tmp_path / f"temp{split_bytes}"
    temp.mkdir()
    context = UnitContext.from_spec(spec, config, str(temp), tokenizer)
    return [process_unit(u, context) for u in units]


def _near(results, threshold):
    records = [r for item in by_input(results).items() for r in band_records(item)]
    bands: dict[int, list[tuple[str, str]]] = {}
    for band, member in records:
        bands.setdefault(band, []).append(member)
    pairs = sorted({p for members in bands.values() for p in candidate_pairs(members)})
    return mark_near_duplicates(mark_duplicates(results, drop=True), pairs, threshold)[0]


def test_a_split_jsonl_is_one_input_for_dedup_whatever_split_bytes(tmp_path, spec):
    """A templated jsonl split in ranges had its ranges dropped as near duplicates (or duplicates)
    of each other: 1,067 of 3,000 documents kept, depending on --split_bytes."""
    rng = random.Random(5)
    records = [{"text": f"Record {i}: the " + " ".join(rng.choice(WORDS) for _ in range(12)) + "."}
               for i in range(150)]
    body = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "a.jsonl").write_text(body + body)  # two equal halves: equal ranges with some splits
    edited = records[:]
    edited[7] = {"text": "An edited record about the castle."}
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited * 2))
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    size = (tmp_path / "a.jsonl").stat().st_size
    outcomes = {}
    for split_bytes in (1 << 30, size // 3 + 17):
        results = _near(_results(paths, split_bytes, spec, tmp_path), 0.9)
        kept = {r.input for r in results if r.skip_reason is None}
        dropped = {r.input: r.skip_reason for r in results if r.skip_reason is not None}
        outcomes[split_bytes] = (kept, sorted(dropped))
        assert kept == {str(paths[0])}, (split_bytes, dropped)
        assert all(reason.startswith(f"near duplicate of {paths[0]} ") for reason in dropped.values())
    assert len(set(map(str, outcomes.values()))) == 1


def test_ranges_of_one_file_are_never_duplicates_of_each_other(tmp_path, spec):
    body = "".join(json.dumps({"text": f"line {i} of the book " + "tea " * 20}) + "\n" for i in range(100))
    (tmp_path / "a.jsonl").write_text(body * 2)
    size = (tmp_path / "a.jsonl").stat().st_size
    results = mark_duplicates(_results([tmp_path / "a.jsonl"], size // 2, spec, tmp_path), drop=True)
    assert len(results) == 2 and results[0].key == results[1].key  # two equal ranges
    assert all(r.skip_reason is None and r.duplicate_of is None for r in results)


def _unsampled_short_texts(count: int) -> list[bytes]:
    """12-word texts none of whose bigrams is sampled (about 4% of them)."""
    rng, found = random.Random(3), []
    while len(found) < count:
        text = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(12)).encode()
        hasher = MinHasher(len(text))
        hasher.update(text)
        hasher.update(b"", final=True)
        if not hasher._state[4]:
            found.append(text)
    return found


def test_short_texts_without_a_sampled_bigram_are_not_alike():
    """Both got the all-empty 'fewer than two words' signature: similarity 1.0."""
    a, b = _unsampled_short_texts(2)
    assert signature_similarity(minhash_signature(a), minhash_signature(b)) < 0.2
    assert signature_similarity(minhash_signature(a), minhash_signature(a)) == 1.0
    hasher = MinHasher(len(a))
    for i in range(0, len(a), 5):  # in pieces: the same signature
        hasher.update(a[i: i + 5])
    assert np.array_equal(hasher.signature(), minhash_signature(a))
    assert signature_similarity(minhash_signature(b"one"), minhash_signature(b"two")) == 0.0


def test_exact_duplicates_are_no_near_duplicate_candidates_but_their_neighbours_pair_with_each_copy():
    from pipeline.beam.dedup.near import MAX_BAND_GROUP

    members = [("c.txt", "k2"), ("a.txt", "k1"), ("b.txt", "k1"), ("a.txt", "k1")]  # a and b: one content
    assert candidate_pairs(members) == [("a.txt", "c.txt"), ("b.txt", "c.txt")]
    crowd = [(f"copy{i:03d}.txt", "same") for i in range(MAX_BAND_GROUP + 5)] + [("near.txt", "other")]
    assert candidate_pairs(crowd) == [("copy000.txt", "near.txt")]  # a crowded band pairs with its first only


def _signature_results(rng: np.random.Generator) -> list:
    """Whole-input results of signatures made to share bands: mutated copies of a few bases, exact
    duplicates (one content, one signature), and a crowd of more than MAX_BAND_GROUP on one base."""
    from pipeline.beam.dedup.near import MAX_BAND_GROUP
    from pipeline.beam.unit_results import UnitResult

    bases = rng.integers(0, 2**63, size=(6, 256), dtype=np.uint64)
    results = []
    for i in range(160):
        signature = bases[i % len(bases)].copy()
        changed = rng.choice(256, size=int(rng.integers(0, 240)), replace=False)
        signature[changed] = rng.integers(0, 2**63, size=len(changed), dtype=np.uint64)
        results.append(UnitResult(source=f"/in/d{rng.integers(10**6):06d}-{i}.txt", key=f"k{i}",
                                  signature=signature.tobytes().hex()))
    for i in range(8):  # exact duplicates of the first results: never pairs of each other
        results.append(UnitResult(source=f"/in/copy{i}.txt", key=results[i].key, signature=results[i].signature))
    crowd = bases[0].tobytes().hex()
    results += [UnitResult(source=f"/in/crowd{i:03d}.txt", key=f"c{i}", signature=crowd)
                for i in range(MAX_BAND_GROUP + 6)]
    # A crowd of copies (one content: no pair among them) with a few other contents, names whose
    # order as strings and as UTF-8 bytes must agree (a lone surrogate, accents, astral): the first
    # by path pairs with the other contents only.
    copies = bases[1].tobytes().hex()
    odd = ["\udc80", "é", "\U0001f600", "Z", "\ud7ff", "\ue000"]
    results += [UnitResult(source=f"/in/copies/{odd[i % len(odd)]}{i:03d}.txt", key="copy" if i % 9 else f"other{i}",
                           signature=copies) for i in range(3 * MAX_BAND_GROUP)]
    return results


def test_packed_bands_give_the_pairs_band_records_give():
    """The job's candidates (bands packed per partition, a group's members in one value) are the
    reference's: one (band, (input, content keys)) record per band grouped by band hash, then
    candidate_pairs of each band's members (crowded bands, exact duplicates and all)."""
    from pipeline.beam.dedup.band_packs import BAND_PARTITIONS, merged_packs, pack_bands, pairs_in_partition
    from pipeline.beam.dedup.near import _content, input_signature

    rng = np.random.default_rng(11)
    results = _signature_results(rng)
    bands: dict[int, list] = {}
    for result in results:
        for band, member in band_records((result.source, [result])):
            bands.setdefault(band, []).append(member)
    expected = {p for members in bands.values() for p in candidate_pairs(members)}
    assert len(expected) > 200 and any("crowd" in a and "crowd" in b for a, b in expected)
    order = rng.permutation(len(results))  # any order, any grouping of the members
    packs = [pack for i in order for pack in pack_bands(results[i].source, _content([results[i]]),
                                                        input_signature([results[i]]), int(i % 2))]
    values: dict[int, list[bytes]] = {}
    for start in range(0, len(packs), 97):
        for partition, value in merged_packs(packs[start:start + 97]):
            values.setdefault(partition, []).append(value)
    assert set(values) == set(range(BAND_PARTITIONS))
    place = {results[i].source: int(i % 2) for i in range(len(results))}
    found = [pair for item in values.items() for pair in pairs_in_partition(item)]
    assert {(a, b) for a, b, _, _ in found} == expected
    assert all(place[a] == place_a and place[b] == place_b for a, b, place_a, place_b in found)


def test_band_files_give_the_pairs_the_packed_values_give(tmp_path):
    """The workers' packs go to the shuffle as slices of a file a work unit (`write_band_file`), a
    partition without a member as None: the pairing reads them back and finds the pairs it finds on
    the values themselves, with a side input's values among them; a slice its file no longer holds
    is named."""
    from pipeline.beam.dedup.band_packs import (
        BAND_PARTITIONS,
        BandSlice,
        merged_packs,
        pack_bands,
        pairs_in_partition,
        write_band_file,
    )
    from pipeline.beam.dedup.near import _content, input_signature

    rng = np.random.default_rng(5)
    results = _signature_results(rng)
    packs = [pack for i, r in enumerate(results) for pack in pack_bands(r.source, _content([r]),
                                                                        input_signature([r]), i % 2)]
    expected = sorted(pair for p, value in merged_packs(packs) for pair in pairs_in_partition((p, [value])))
    by_partition: dict[int, list] = {}
    few = merged_packs(packs[:5])  # as the inputs over --split_bytes come: values in a side input
    for start in range(5, len(packs), 61):
        for partition, piece in write_band_file(str(tmp_path / f"unit{start}-bands.bin"), packs[start:start + 61]):
            by_partition.setdefault(partition, []).append(piece)
    empty = write_band_file(str(tmp_path / "none-bands.bin"), [])
    assert empty == [(p, None) for p in range(BAND_PARTITIONS)] and not (tmp_path / "none-bands.bin").exists()
    for partition, piece in empty:
        by_partition[partition].append(piece)
    assert all(isinstance(v, BandSlice) for values in by_partition.values() for v in values if v is not None)
    found = sorted(pair for item in by_partition.items() for pair in pairs_in_partition(item, more=few))
    assert found == expected and len(found) > 200
    (tmp_path / "unit5-bands.bin").write_bytes(b"short")
    with pytest.raises(OSError, match="temp folder changed"):
        [pairs_in_partition(item) for item in by_partition.items()]


def test_a_signature_is_read_back_from_its_record_or_its_own_file(tmp_path, spec):
    import pytest

    from pipeline.beam.dedup.near import input_signature
    from pipeline.beam.dedup.signatures import IN_FILE, IN_RESULT, SignatureMissing, read_signature, write_signature

    (tmp_path / "a.txt").write_text("The river ran past the stone mill and the bread was warm. " * 20)
    [result] = _results([tmp_path / "a.txt"], 1 << 30, spec, tmp_path)  # its record saved as a run saves it
    temp = str(tmp_path / f"temp{1 << 30}")
    signature = input_signature([result])
    assert np.array_equal(read_signature(temp, result.source, IN_RESULT), signature)
    assert write_signature(temp, "/in/split.jsonl", signature[::-1]) == IN_FILE
    assert np.array_equal(read_signature(temp, "/in/split.jsonl", IN_FILE), signature[::-1])
    with pytest.raises(SignatureMissing, match="missing.txt"):
        read_signature(temp, "/in/missing.txt", IN_RESULT)


def _edited(text: str, rng: random.Random, share: float) -> str:
    return " ".join(w if rng.random() >= share else rng.choice(WORDS) + "x" for w in text.split(" "))


def test_the_job_marks_duplicates_and_near_duplicates_as_the_reference_functions_do(tmp_path, spec):
    """The job's joins (bands packed, signatures read back for the candidates only) against
    mark_duplicates and mark_near_duplicates on the same results: the same pairs, similarities,
    clusters and drops, a split jsonl among them."""
    from pipeline.consumers.outputs import manifest_with_inputs
    from schemas import manifest as m
    from tests.conftest import run_preprocess

    rng = random.Random(17)
    folder = tmp_path / "in"
    folder.mkdir()
    texts = [" ".join(rng.choice(WORDS) for _ in range(400)) + "." for _ in range(4)]
    files = {"a.txt": texts[0], "b.txt": _edited(texts[0], rng, 0.03), "c.txt": texts[1], "d.txt": texts[1],
             "e.txt": _edited(texts[1], rng, 0.05), "f.txt": texts[2], "g.txt": _edited(texts[2], rng, 0.3)}
    files["h.txt"] = _edited(files["b.txt"], rng, 0.03)  # a chain: h near b near a
    for name, text in files.items():
        (folder / name).write_text(text + "\n")
    records = [{"text": " ".join(rng.choice(WORDS) for _ in range(60))} for _ in range(40)]
    (folder / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    records[5] = {"text": "An edited record."}
    (folder / "k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    paths = sorted(folder.iterdir())
    split_bytes = (folder / "j.jsonl").stat().st_size // 3 + 7
    results = _results(paths, split_bytes, spec, tmp_path)
    expected, report = mark_near_duplicates(mark_duplicates(results, drop=True), _reference_pairs(results), 0.8)
    run_preprocess([folder], tmp_path / "out", "--dedup", "--near_dedup", "0.8", "--split_bytes", str(split_bytes),
                   "--max_unk_fraction", "1", "--min_tokens", "1")
    manifest = manifest_with_inputs(str(tmp_path / "out"))
    key = (m.KEY_PATH, m.KEY_NEAR_DUPLICATE_OF, m.KEY_SIMILARITY)
    assert sorted(tuple(p[k] for k in key) for p in manifest[m.KEY_NEAR_DUPLICATES]) == \
        sorted(tuple(p[k] for k in key) for p in report)
    assert len(report) >= 4
    assert {s[m.KEY_PATH]: s[m.KEY_REASON] for s in manifest[m.KEY_SKIPPED]} == \
        {r.source: r.skip_reason for r in expected if r.skip_reason is not None}
    assert any("near duplicate" in r.skip_reason for r in expected if r.skip_reason and r.file)


def _reference_pairs(results) -> list[tuple[str, str]]:
    bands: dict[int, list[tuple[str, str]]] = {}
    for item in by_input(results).items():
        for band, member in band_records(item):
            bands.setdefault(band, []).append(member)
    return sorted({p for members in bands.values() for p in candidate_pairs(members)})
