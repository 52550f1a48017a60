"""The benchmarks' distinct text (issue 32): the corpus generator, the peers' exactness check and the
job cost fit, on small inputs (no speed is asserted: speed lives in benchmarks/README.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from benchmarks.generate_corpus import fit_heaps, generate, heaps_points, learn, main
from pipeline.sample import SAMPLE_BOOKS
from tests.conftest import REPO

TOKENIZERS_DIR = REPO / "tests" / "data" / "tokenizers"


@pytest.fixture(scope="module")
def model():
    return learn(SAMPLE_BOOKS)  # three real books, about 60,000 words


def _paragraphs(paths) -> list[str]:
    return [p for path in paths for p in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")) if p.strip()]


def test_generated_text_is_deterministic_distinct_and_grows_its_vocabulary_as_the_books_do(model, tmp_path):
    first = generate(model, tmp_path / "a", mb=1.0, seed=7, book_mb=0.3)
    again = generate(model, tmp_path / "b", mb=1.0, seed=7, book_mb=0.3)
    other = generate(model, tmp_path / "c", mb=0.2, seed=8, book_mb=0.3)
    assert [p.name for p in first] == [p.name for p in again] and len(first) == 4
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(first, again))
    assert other[0].read_bytes()[:5000] != first[0].read_bytes()[:5000]
    assert 0.99e6 <= sum(p.stat().st_size for p in first) <= 1.01e6
    paragraphs = _paragraphs(first)
    assert len(paragraphs) > 1500 and len(set(paragraphs)) == len(paragraphs)  # no paragraph repeated
    # the curve counted from the files follows the books' fit: the generator adds exactly the new
    # words that keep V on K n^beta at each paragraph's end, spread at random inside it, so between
    # ends V strays by about the square root of a paragraph's new words (a few words: 3% of V at
    # 10^3 words, under 1% from 10^4 on), and the fitted exponents agree to the third decimal
    generated = heaps_points(p.read_text(encoding="utf-8") for p in first)
    assert generated[-1][0] > 150_000
    for n, v in generated:
        assert abs(v / (model.k * n ** model.beta) - 1) < (0.03 if n < 10_000 else 0.01), (n, v)
    k, beta = fit_heaps(generated)
    assert abs(beta - model.beta) < 0.01 and abs(k / model.k - 1) < 0.1, (k, beta, model.k, model.beta)
    assert 0.4 < model.beta < 0.8  # English books


def test_the_generator_prints_both_curves(tmp_path, capsys):
    report = main(["--out", str(tmp_path / "g"), "--mb", "0.3", "--books", str(SAMPLE_BOOKS),
                   "--json", str(tmp_path / "g.json")])
    printed = capsys.readouterr().out
    assert "real books K" in printed and "generated K" in printed and "V real fit" in printed
    assert abs(report["generated"]["beta"] - report["real"]["beta"]) < 0.02
    assert (tmp_path / "g.json").is_file()
    # the same bytes from another process, whose str hashes (set and dict orders) differ
    subprocess.run([sys.executable, "-m", "benchmarks.generate_corpus", "--out", str(tmp_path / "h"), "--mb", "0.3",
                    "--books", str(SAMPLE_BOOKS)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert (tmp_path / "h" / "generated_00000.txt").read_bytes() == (tmp_path / "g" / "generated_00000.txt").read_bytes()


def test_too_little_text_to_fit_is_a_clear_error(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "short.txt").write_text("A few words only.\n")
    with pytest.raises(ValueError, match="at least 20,000 words"):
        learn(books)
    with pytest.raises(ValueError, match="no text to learn from"):
        learn(tmp_path / "empty_missing")


def test_peers_are_timed_only_where_their_ids_equal_hf_on_every_document(tmp_path):
    """`benchmarks.peers` on one small book: ours exact (cold and warm figures), `tokie` reported with
    the document where its ids differ from HF's on `Nmt, NFKC` Unigram, `fastokens` refusing it."""
    from benchmarks.peers import main as peers

    for peer in ("tokie", "fastokens"):
        pytest.importorskip(peer, reason="a benchmark peer: pip install -e .[bench]")
    books = tmp_path / "books"
    books.mkdir()
    (books / "book.txt").write_bytes((SAMPLE_BOOKS / "classics__yellow_wallpaper.txt").read_bytes())
    [result] = peers(["--corpus", str(books), "--tokenizer", str(TOKENIZERS_DIR / "nmt_nfkc_unigram"),
                      "--methods", "ours,tokie,fastokens", "--repeat", "1", "--markdown", str(tmp_path / "t.md")])
    methods = result["methods"]
    assert methods["ours"]["cold"] > 0 and methods["ours"]["warm"] > 0 and result["hf"]["cold"] > 0
    assert methods["tokie"] == {"inexact": "cold pass: ids differ from HF's on document 0 of 1"}
    assert "Nmt" in methods["fastokens"]["refused"]
    row = (tmp_path / "t.md").read_text().splitlines()[-1]
    assert row.startswith("| nmt_nfkc_unigram |") and "ids differ" in row and "refused" in row


def test_every_peer_gives_hf_ids_where_it_loads_the_tokenizer():
    """The adapters themselves (template cut, null post-processor, flat buffers) on one paragraph with
    numbers, quotes, accents and a blank line, for byte-level BPE with a RobertaProcessing."""
    import numpy as np

    from benchmarks.peers import build

    text = 'He said, "It\'s 1847 -- café!"\n\n  Two  spaces, a tab\there.'
    path = str(TOKENIZERS_DIR / "roberta.json")
    want = build("hf", path)(text)
    for method in ("ours", "tokie", "fastokens", "snaptokens", "splintr"):
        if method != "ours":
            pytest.importorskip(method, reason="a benchmark peer: pip install -e .[bench]")
        assert np.array_equal(np.asarray(build(method, path)(text), dtype=np.int64), want), method


def test_job_cost_fit_and_nested_sizes(tmp_path):
    from benchmarks.job_cost import fit_line, nested_corpora

    fixed, rate = fit_line([5, 15, 45], [4.0 + 5 / 20, 4.0 + 15 / 20, 4.0 + 45 / 20])
    assert abs(fixed - 4.0) < 1e-9 and abs(rate - 20.0) < 1e-9
    with pytest.raises(ValueError, match="two distinct sizes"):
        fit_line([5, 5], [1, 2])
    with pytest.raises(ValueError, match="do not grow"):
        fit_line([5, 15], [3, 2])
    source = tmp_path / "source"
    source.mkdir()
    for i in range(6):
        (source / f"b{i}.txt").write_bytes(bytes([97 + i]) * 100_000)
    small, large = nested_corpora(source, [0.2, 0.5], tmp_path / "sizes")
    assert sorted(p.name for p in small.iterdir()) == ["b0.txt", "b1.txt"]
    assert sorted(p.name for p in large.iterdir()) == [f"b{i}.txt" for i in range(5)]
    with pytest.raises(ValueError, match="less than the largest size"):
        nested_corpora(source, [0.2, 5], tmp_path / "too_big")


def test_job_cost_runs_with_bytecode_written_as_an_install_would(tmp_path, monkeypatch):
    """Under PYTHONDONTWRITEBYTECODE every timed job would compile its modules from source again."""
    import subprocess
    import sys

    from benchmarks.job_cost import job_environment

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = job_environment(tmp_path / "bytecode")
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "bytecode")
    subprocess.run([sys.executable, "-c", "import schemas.options"], env=env, check=True, cwd=tmp_path.parent,
                   timeout=120)
    assert list((tmp_path / "bytecode").rglob("options*.pyc")), "the job's modules left no bytecode"
