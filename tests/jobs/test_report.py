import os

import pytest

from tests.conftest import HAVE_CORPUS, corpus_book, excerpt, run_preprocess

pytestmark = pytest.mark.slow


def test_report_renders_pngs_and_a_self_contained_page(small_books, tmp_path):
    from jobs.report import run

    data = tmp_path / "data"
    run_preprocess([small_books], data, "--num_shards", "3", "--max_seq_length", "128")
    figures = run([str(data), "--html", str(tmp_path / "report.html")])
    assert set(figures) == {"row_lengths", "tokens_per_input", "top_tokens", "unk_rate", "script_mix", "mask_ratios",
                            "padding"}
    for path in figures.values():
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert {os.path.dirname(p) for p in figures.values()} == {str(tmp_path)}  # beside the page
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    page = (tmp_path / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 7 and "http" not in page.split("<body>")[1]
    if HAVE_CORPUS:
        assert "humphry_clinker" in page  # the skipped HTML page is listed
        assert "<tr><td>not text: an HTML/XML page</td><td>1</td></tr>" in page  # skipped by reason, a table
    assert "{" not in page.split("<table>")[1].split("</table>")[0]  # no Python dict in the counts table
    run([str(data)])  # default: a sibling folder, nothing written inside the dataset
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    assert (tmp_path / "data-report" / "report.html").is_file() and (tmp_path / "data-report" / "mask_ratios.png").is_file()
    assert "Quality gates" in page and "[UNK] gate: inputs with more than 0.1" in page


def test_report_refuses_a_folder_without_output(tmp_path):
    from jobs.report import run

    with pytest.raises(SystemExit):
        run([str(tmp_path)])


def test_report_shows_the_gates(tmp_path):
    """A gated input and a near-duplicate pair appear in the report's page and plots."""
    import shutil

    from jobs.report import run
    from pipeline.kernels.text.cleaning import clean_bytes
    from tests.jobs.test_quality import _edition

    books = tmp_path / "books"
    books.mkdir()
    shutil.copy(excerpt("classics__shen_yin_yu.txt"), books)
    shutil.copy(corpus_book("classics__yellow_wallpaper.txt"), books / "a.txt")
    (books / "b.txt").write_text(_edition(clean_bytes((books / "a.txt").read_bytes()).text), encoding="utf-8")
    run_preprocess([books], tmp_path / "data", "--max_seq_length", "128")
    run([str(tmp_path / "data"), "--html", str(tmp_path / "report.html")])
    page = (tmp_path / "report.html").read_text()
    assert "shen_yin_yu.txt: [UNK] gate: " in page
    assert "<td>b.txt</td><td>a.txt</td>" in page  # the near-duplicate table
