"""Deduplication treats a split file as one input, and short texts as unlike each other (issue 23
points 2 and 6)."""

from __future__ import annotations

import json
import random

import numpy as np

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
