import pytest

from tests.conftest import run_preprocess

pytestmark = pytest.mark.slow


def test_report_renders_pngs_and_a_self_contained_page(small_books, tmp_path):
    from jobs.report import run

    data = tmp_path / "data"
    run_preprocess([small_books], data, "--num_shards", "3", "--max_seq_length", "128")
    figures = run([str(data), "--html", str(tmp_path / "report.html")])
    assert set(figures) == {"row_lengths", "tokens_per_input", "top_tokens", "unk_rate", "mask_ratios", "padding"}
    for path in figures.values():
        with open(path, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 6 and "http" not in page.split("<body>")[1]
    assert "humphry_clinker" in page  # the skipped HTML page is listed


def test_report_refuses_a_folder_without_output(tmp_path):
    from jobs.report import run

    with pytest.raises(SystemExit):
        run([str(tmp_path)])
