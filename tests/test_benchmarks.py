"""The benchmark harness runs end to end on a tiny corpus (no speed is asserted: speed lives in
benchmarks/README.md)."""

import json
import shutil

import pytest

from tests.conftest import TOKENIZER_DIR, corpus_book

pytestmark = pytest.mark.slow


def test_harness_runs_on_a_tiny_corpus(tmp_path):
    from benchmarks.run import run

    corpus = tmp_path / "books"
    corpus.mkdir()
    shutil.copy(corpus_book("classics__yellow_wallpaper.txt"), corpus)
    report = run(["--corpus", str(corpus), "--tokenizer", str(TOKENIZER_DIR), "--repeat", "1", "--scale", "1",
                  "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")])
    saved = json.loads((tmp_path / "b.json").read_text())
    assert [s["step"] for s in saved["steps"]] == [
        "limit: tokenizers.encode_batch", "limit: tokenizers.encode_batch_fast", "limit: tokie.encode_batch", "ours",
        "peer_run_mlm"]
    steps = {s["step"]: s for s in report["steps"]}
    # every step saw the same corpus: ours counts the limit's tokens less the Gutenberg boilerplate
    # (about a third of this short book)
    ours_tokens = steps["ours"]["runs"][0]["tokens"]
    limit_tokens = steps["limit: tokenizers.encode_batch"]["runs"][0]["tokens"]
    assert limit_tokens == steps["limit: tokenizers.encode_batch_fast"]["runs"][0]["tokens"]
    assert limit_tokens == steps["limit: tokie.encode_batch"]["runs"][0]["tokens"]  # the peer's ids, specials cut
    assert 0.5 * limit_tokens < ours_tokens < limit_tokens
    assert all(s["mb_per_s"][0] > 0 and s["peak_rss_mb"] > 0 for s in report["steps"])
    assert set(report["ratios"]) >= {"ours_vs_limit", "ours_vs_run_mlm", "masking_vs_collator_torch", "rss_4x_vs_1x"}
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    # the job says where its time went, and tokenization alone was timed on one thread against the peers
    assert {"read_clean", "tokenize_chunk", "write_parts", "mask_write_shards", "launcher_and_beam_s"} <= set(
        report["ours_stages_s"])
    assert set(report["tokenize_one_thread"]["mb_per_s"]) == {
        "hf encode_batch", "hf encode_batch_fast", "maskbeam fast", "tokie encode_batch"}


def test_gpu_train_runs_in_its_dry_mode(tmp_path):
    """benchmarks/gpu_train.py end to end on the CPU (tiny models, 64 tokens, its own sample data sized
    for 8 devices, one process and two gloo ranks under torchrun), through jobs.train's own step, so its
    first GPU run does not fail on a typo; a configuration that fails is a row with its error and the
    JSON is written all the same. (BERT only: each configuration is a torchrun launch, and ModernBERT
    through the trainer's own build_run and step is tests/jobs/test_train_ddp.py's
    test_bpe_output_trains_other_families_that_fill_masks[modernbert].)"""
    from benchmarks.gpu_train import main

    results = main(["--dry_run", "--archs", "bert,nosuch", "--json", str(tmp_path / "gpu.json")])
    configs = [(r["arch"], r["head"], r["devices"]) for r in results]
    assert configs == [("bert", "gathered", 1), ("bert", "full", 1), ("nosuch", "gathered", 1),
                       ("nosuch", "full", 1), ("bert", "gathered", 2)]
    failed = [r for r in results if "error" in r]
    assert [r["arch"] for r in failed] == ["nosuch", "nosuch"] and all("nosuch" in r["error"] for r in failed)
    for r in results:
        if "error" not in r:
            assert r["tokens_per_s"] > 0 and 0 <= r["data_wait_share"] < 1 and r["seq_len"] == 64, r
            assert r["precision"] == "fp32" and r["train_rows"] >= 8 * 4 * 3, r  # 8 devices x 4 rows x 3 steps
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["results"] == results and saved["sized_for_devices"] == 8 and saved["rows_needed"] == 96
    # more rows than the sample gives: the books are repeated until there are enough
    from benchmarks.gpu_train import prepare_data
    from pipeline.consumers.loading import MlmShardDataset

    more = prepare_data(64, results[0]["train_rows"] + 1, str(tmp_path / "more"))
    assert len(MlmShardDataset(more)) >= results[0]["train_rows"] + 1 and more.endswith("-x2")


@pytest.mark.parametrize("kind", ["copies", "near_copies"])
def test_many_files_hostile_corpora_are_what_they_say(tmp_path, kind):
    """`benchmarks.many_files --copies` and `--near_copies` measure the two hostile corpora of the end
    of the job: the copies are one content (all but the first reported as duplicates), the near copies
    no two of one content and all near duplicates of the first (`--near_dedup` drops all but it)."""
    from benchmarks.many_files import write_inputs
    from pipeline.consumers.outputs import input_entries, load_manifest
    from schemas import manifest as m
    from tests.conftest import run_preprocess

    folder = tmp_path / "in"
    write_inputs(folder, 40, copies=kind == "copies", near=kind == "near_copies")
    out = tmp_path / "out"
    run_preprocess([folder], out, "--near_dedup", "0.8", "--max_seq_length", "128")
    counts = load_manifest(str(out))[m.KEY_COUNTS]
    sections: dict[str, list] = {}
    for section, entry in input_entries(str(out)):
        sections.setdefault(section, []).append(entry)
    first = str(folder / "0000" / "doc0000000.txt")
    if kind == "copies":  # kept without --dedup, each reported as a duplicate of the first
        assert counts[m.FILES_SKIPPED] == 0 and len(sections[m.KEY_DUPLICATES]) == 39
        assert {e[m.KEY_DUPLICATE_OF] for e in sections[m.KEY_DUPLICATES]} == {first}
    else:
        assert counts[m.FILES_SKIPPED] == 39 and list(counts[m.FILES_SKIPPED_BY_REASON]) == ["near duplicate"]
        assert m.KEY_DUPLICATES not in sections
        assert all(f"near duplicate of {first} " in str(e) for e in sections[m.KEY_SKIPPED]), sections[m.KEY_SKIPPED][0]
        assert len(sections[m.KEY_NEAR_DUPLICATES]) == 40 * 39 // 2  # every pair reported (under 64 a band)
