"""What a newcomer's mistakes get: options checked before anything is written, one error line naming
the culprit (no usage block), help with every default, and the `maskbeam` front door naming an unknown
job. None of these runs a pipeline: each fails before Beam starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.sample import SAMPLE_BOOKS, SAMPLE_TOKENIZER
from tests.conftest import REPO


def _refused(tmp_path, capsys, *extra: str) -> str:
    from jobs.preprocess import run

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as error:
        run(["--input", str(SAMPLE_BOOKS), "--output", str(out), "--tokenizer", str(SAMPLE_TOKENIZER), *extra])
    assert error.value.code == 2
    assert not out.exists(), "refused only after the output folder was made"
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, f"one error line expected, got:\n{err}"
    assert "usage:" not in err and "--help" in err
    return err


@pytest.mark.parametrize("extra, message", [
    (["--runner=DirectRuner"], "'DirectRuner' is not a Beam runner; did you mean DirectRunner"),
    (["--runner", "NoSuchRunner"], "'NoSuchRunner' is not a Beam runner"),
    (["--runner=no_such_module.Runner"], "cannot import no_such_module"),
    (["--direct_num_worker=2"], "--direct_num_worker=2 (did you mean --direct_num_workers?)"),
    (["--direct_running_mode=multi_process"], "invalid choice: 'multi_process'"),
    (["--direct_num_workers=two"], "invalid int value: 'two'"),
])
def test_unknown_beam_options_and_runners_fail_before_any_output(tmp_path, capsys, extra, message):
    assert message in _refused(tmp_path, capsys, *extra)


@pytest.mark.parametrize("extra, message", [
    (["--short_seq_prob", "0.2"], "--short_seq_prob applies only with --packing sentences"),
    (["--span_p", "0.3"], "--span_p applies only with --span_mask"),
    (["--max_span", "5", "--whole_word_mask"], "--max_span applies only with --span_mask"),
    (["--hub_private"], "--hub_private applies only with --push_to_hub"),
    (["--hf_split", "test"], "--hf_split applies only with --hf_dataset"),
    (["--resume", "--overwrite"], "give one of them"),
    (["--masking", "dynamic", "--dupe_factor", "3"], "--dupe_factor applies to --masking static only"),
])
def test_options_that_do_nothing_in_the_chosen_mode_are_refused(tmp_path, capsys, extra, message):
    assert message in _refused(tmp_path, capsys, *extra)


def test_several_useless_options_are_each_named_once(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--span_p", "0.3", "--hub_private")
    assert err.count("--span_p") == 1 and err.count("--hub_private") == 1


def test_options_that_apply_are_taken(tmp_path):
    """The same flags where they do something pass the checks (the run itself is another test's)."""
    from jobs.preprocess import _checked, build_parser

    parser = build_parser()
    known, _ = parser.parse_known_args(["--packing", "sentences", "--short_seq_prob", "0.2", "--span_mask",
                                        "--span_p", "0.3", "--max_span", "4"])
    known.hf_split_given = False
    _checked(parser, known)
    assert (known.short_seq_prob, known.span_p, known.max_span) == (0.2, 0.3, 4)
    known, _ = parser.parse_known_args([])
    known.hf_split_given = False
    _checked(parser, known)
    assert (known.short_seq_prob, known.span_p, known.max_span) == (0.1, 0.2, 10)  # the defaults the help names


def test_short_rows_need_no_min_tokens_flag():
    """--max_seq_length 64 alone was refused: `--min_tokens must be in [0, 62], got 64` (a default)."""
    from jobs.preprocess import build_parser, resolved_min_tokens

    parser = build_parser()
    given = lambda *argv: resolved_min_tokens(parser.parse_known_args(list(argv))[0])  # noqa: E731
    assert given() == 64 and given("--max_seq_length", "128") == 64
    assert given("--max_seq_length", "64") == 62 and given("--max_seq_length", "16") == 14
    assert given("--max_seq_length", "64", "--min_tokens", "8") == 8


@pytest.mark.parametrize("job", ["train", "validate", "report", "publish", "inspect_output", "train_tokenizer"])
def test_every_job_reports_a_bad_flag_in_one_line(job, capsys):
    """jobs.train printed a 25-line usage block before `error: ...` (so did the other jobs)."""
    import importlib

    with pytest.raises(SystemExit) as error:
        importlib.import_module(f"jobs.{job}").run(["--no_such_flag"])
    assert error.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m jobs.{job}: error: "), err
    assert lines[0].endswith("(--help lists every option)") and "usage:" not in err, err


def test_a_folder_that_is_not_a_maskbeam_output_gets_the_right_advice_the_first_time(tmp_path, capsys):
    from jobs.preprocess import run

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit):
            run(["--input", str(SAMPLE_BOOKS), "--output", str(foreign), *extra])
        err = capsys.readouterr().err
        assert "is not a MaskBeam output" in err, err
        assert "pass --overwrite to replace it" not in err
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_every_preprocess_option_states_its_default(capsys):
    from jobs.preprocess import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    missing = [action.option_strings[0] for action in parser._actions
               if action.option_strings and action.dest != "help"
               and not any(word in parser.formatter_class("x")._get_help_string(action)
                           for word in ("default", "required"))]
    assert not missing, f"no default in the help of {missing}"
    assert "longest span in words" in text  # as the masking kernel and the README count it
    assert "(default: 512)" in text and "(default: 0.15)" in text and "(default: 0)" in text


def test_maskbeam_names_an_unknown_job_and_runs_the_known_ones():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    typo = subprocess.run([sys.executable, "-m", "jobs.cli", "preprocss"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert typo.returncode == 2
    assert "unknown job 'preprocss'; did you mean 'preprocess'?" in typo.stderr
    inspect = subprocess.run([sys.executable, "-m", "jobs.cli", "inspect", "--help"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert inspect.returncode == 0 and "jobs.inspect_output" in inspect.stdout, inspect.stderr


def test_plural_and_printable():
    from pipeline.console.formatting import plural, printable

    assert [plural(n, "input") for n in (0, 1, 2, 1000)] == ["0 inputs", "1 input", "2 inputs", "1,000 inputs"]
    hostile = "book\x1b]0;pwned\x07.txt \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ \x9b31m \u202eevil"
    shown = printable(hostile)
    assert shown.isprintable() and "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown
    assert "\\x1b]0;pwned\\x07" in shown and "\\u202e" in shown
    assert printable("a\nb", keep_newlines=False) == "a\\x0ab" and printable("a\nb") == "a\nb"
    assert printable("Zoë — “quoted” 日本") == "Zoë — “quoted” 日本"  # printable text is left alone


def test_report_plot_labels_are_not_cut_off(tmp_path):
    """An input's long name as a bar label: the saved image holds the whole label (not cut at the
    left edge where tight_layout cannot make room)."""
    import matplotlib.image
    import numpy as np

    from pipeline.consumers.report import _figure

    label = "a_very_long_input_name_from_a_folder_of_many_books__volume_one_of_three.txt"
    def draw(ax):
        ax.barh([label, "b.txt"], [3, 5])

    path = _figure(draw, str(tmp_path / "bars.png"), size=(4, 3))
    image = matplotlib.image.imread(path)
    edges = np.concatenate([image[:, :2, :3], image[:, -2:, :3]], axis=1)
    assert (edges > 0.9).all(), "a label touches the image's edge: it is cut off"
