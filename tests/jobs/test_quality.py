"""Quality gates: the [UNK] gate, near-duplicate inputs and the script mix, deterministic and
reported like everything else (issue: know what goes into training)."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

from pipeline.consumers.outputs import manifest_with_inputs
from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.kernels.text.quality import NUM_PERM, minhash_signature, script_mix, signature_similarity
from schemas import manifest as m
from tests.conftest import TOKENIZER_DIR, excerpt, run_preprocess

AUSTEN = "classics__pride_and_prejudice.txt"
HOMER = ("poetry__iliad.txt", "poetry__odyssey.txt")
CHINESE = "classics__shen_yin_yu.txt"
EDIT_SHARE = 0.05
# Weighted Jaccard of word-bigram counts when a share e of the words is replaced by new words:
# each edit changes two bigrams, so (1 - e)**2 of them stay on both sides.
EXPECTED = (1 - EDIT_SHARE) ** 2 / (2 - (1 - EDIT_SHARE) ** 2)


def _edition(text: str, seed: int = 0) -> str:
    """Another edition: EDIT_SHARE of the words replaced by words the book does not have."""
    rng = random.Random(seed)
    return " ".join(w if rng.random() >= EDIT_SHARE else f"emended{rng.randrange(10**6)}" for w in text.split(" "))


def _text(name: str) -> str:
    return clean_bytes(excerpt(name).read_bytes()).text


def test_signatures_estimate_the_similarity_of_editions_and_books():
    original = _text(AUSTEN)
    edition = _edition(original)
    estimates = [signature_similarity(minhash_signature(original.encode(), seed=s),
                                      minhash_signature(edition.encode(), seed=s)) for s in range(8)]
    # 8 independent signatures: their mean is within 4 standard errors of the expected similarity
    standard_error = np.sqrt(EXPECTED * (1 - EXPECTED) / NUM_PERM / 8) * 2  # x2: sampled bigrams add variance
    assert abs(np.mean(estimates) - EXPECTED) < 4 * standard_error, (estimates, EXPECTED)
    iliad, odyssey = (_text(name) for name in HOMER)
    assert signature_similarity(minhash_signature(iliad.encode()), minhash_signature(odyssey.encode())) < 0.4
    assert np.array_equal(minhash_signature(original.encode()), minhash_signature(original.encode()))


def test_script_mix():
    assert script_mix(_text(CHINESE).encode())["Han"] > 0.95
    assert script_mix("Hello, \u041c\u0438\u0440!".encode()) == {"Latin": 0.625, "Cyrillic": 0.375}
    assert script_mix(b"1234 ... !!") == {}


@pytest.fixture(scope="module")
def quality_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quality_inputs")
    shutil.copy(excerpt(AUSTEN), folder / "a_pride_and_prejudice.txt")
    (folder / "b_pride_and_prejudice_second_edition.txt").write_text(_edition(_text(AUSTEN)), encoding="utf-8")
    for name in (*HOMER, CHINESE):
        shutil.copy(excerpt(name), folder / name)
    return folder


def _manifest(out) -> dict:
    return manifest_with_inputs(str(out))


def test_near_duplicates_are_reported_and_dropped(quality_inputs, tmp_path):
    edition = str(quality_inputs / "b_pride_and_prejudice_second_edition.txt")
    original = str(quality_inputs / "a_pride_and_prejudice.txt")
    run_preprocess([quality_inputs], tmp_path / "report", "--max_unk_fraction", "1")
    reported = _manifest(tmp_path / "report")
    pairs = reported[m.KEY_NEAR_DUPLICATES]
    assert [(p[m.KEY_PATH], p[m.KEY_NEAR_DUPLICATE_OF]) for p in pairs] == [(edition, original)]
    assert abs(pairs[0][m.KEY_SIMILARITY] - EXPECTED) < 0.08
    assert edition in {e[m.KEY_PATH] for e in reported[m.KEY_INPUTS]}  # reported, not dropped
    # --near_dedup 0.8 drops the later member, naming its twin; 1 and 2 workers, any input order
    files = sorted(quality_inputs.iterdir())
    runs = {"one": (files, ["--direct_num_workers", "1"]),
            "two_shuffled": (files[::-1], ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"])}
    manifests = []
    for name, (inputs, extra) in runs.items():
        run_preprocess(inputs, tmp_path / name, "--near_dedup", "0.8", "--max_unk_fraction", "1", *extra)
        manifests.append(_manifest(tmp_path / name))
    skipped = {s[m.KEY_PATH]: s[m.KEY_REASON] for s in manifests[0][m.KEY_SKIPPED]}
    assert skipped[edition].startswith(f"near duplicate of {original} (similarity 0.")
    assert original not in skipped and not any(h in path for path in skipped for h in HOMER)
    assert manifests[0][m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON] == {"near duplicate": 1}
    for manifest in manifests:
        manifest[m.KEY_CONFIG]["output"] = ""
        manifest[m.KEY_CONFIG]["inputs"] = []
    assert manifests[0] == manifests[1]


@pytest.fixture(scope="module")
def chinese_tokenizer(tmp_path_factory):
    from jobs.train_tokenizer import run

    folder = tmp_path_factory.mktemp("chinese_tokenizer")
    run(["--input", str(excerpt(CHINESE)), "--vocab_size", "6000", "--min_frequency", "1", "--output", str(folder)])
    return folder


def test_unk_gate_and_scripts(quality_inputs, chinese_tokenizer, tmp_path):
    chinese = str(quality_inputs / CHINESE)
    run_preprocess([quality_inputs], tmp_path / "bert")
    manifest = _manifest(tmp_path / "bert")
    gated = {s[m.KEY_PATH]: s for s in manifest[m.KEY_SKIPPED]}[chinese]
    assert gated[m.KEY_REASON].startswith("[UNK] gate: ") and str(TOKENIZER_DIR) in gated[m.KEY_REASON]
    assert gated[m.KEY_UNK_FRACTION] > 0.5 and gated[m.KEY_DOMINANT_SCRIPT] == "Han"
    kept = {e[m.KEY_PATH]: e for e in manifest[m.KEY_INPUTS]}
    assert all(e[m.KEY_UNK_FRACTION] < 0.01 and e[m.KEY_DOMINANT_SCRIPT] == "Latin" for e in kept.values())
    assert manifest[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON] == {"[UNK] gate": 1}
    # a tokenizer trained on the book keeps it
    run_preprocess([quality_inputs / CHINESE], tmp_path / "own", tokenizer=chinese_tokenizer)
    own = _manifest(tmp_path / "own")
    assert own[m.KEY_SKIPPED] == [] and own[m.KEY_INPUTS][0][m.KEY_UNK_FRACTION] <= 0.1
    # --scripts keeps only the listed dominant scripts
    run_preprocess([quality_inputs], tmp_path / "latin", "--scripts", "Latin", "--max_unk_fraction", "1")
    reasons = {s[m.KEY_PATH]: s[m.KEY_REASON] for s in _manifest(tmp_path / "latin")[m.KEY_SKIPPED]}
    assert list(reasons) == [chinese] and reasons[chinese].startswith("script: mostly Han")


def test_bad_quality_options_fail_before_writing(quality_inputs, tmp_path, capsys):
    for flag, value, message in (("--max_unk_fraction", "1.5", "--max_unk_fraction must be in [0, 1]"),
                                 ("--near_dedup", "0", "--near_dedup must be in (0, 1]"),
                                 ("--scripts", "Latin,Klingon", "unknown script(s) Klingon")):
        with pytest.raises(SystemExit):
            run_preprocess([quality_inputs], tmp_path / "bad", flag, value)
        assert message in capsys.readouterr().err
        assert not (tmp_path / "bad").exists()
