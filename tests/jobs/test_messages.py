"""What a user's mistakes get from every job: the closest flag for a mistyped one (the job's own flags
were never suggested), a bad path named before Beam, torch or transformers is imported (20-25 s on a
loaded machine), help without doubled defaults, `maskbeam --help` with a line on each job, and the
publish dry-run folder refused as the other jobs refuse an output."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TYPOS = [
    ("preprocess", ["--mlm_probabilty", "0.2"], "--mlm_probabilty (did you mean --mlm_probability?)"),
    ("preprocess", ["--sed", "3"], "--sed (did you mean --seed?)"),
    ("preprocess", ["--ouput", "OUT"], "--ouput (did you mean --output?)"),
    ("train", ["--sed", "3"], "--sed (did you mean --seed?)"),
    ("train", ["--ouput", "OUT"], "--ouput (did you mean --output?)"),
    ("train", ["--trim_padding"], "--trim_padding (did you mean --no_trim_padding?)"),
    ("train_tokenizer", ["--ouput", "OUT"], "--ouput (did you mean --output?)"),
    ("train_tokenizer", ["--vocab_sze", "300"], "--vocab_sze (did you mean --vocab_size?)"),
    ("publish", ["--dry_rn", "OUT"], "--dry_rn (did you mean --dry_run?)"),
    ("inspect_output", ["--splitt", "train"], "--splitt (did you mean --split?)"),
    ("report", ["--out_dri", "OUT"], "--out_dri (did you mean --out_dir?)"),
    ("validate", ["--hepl"], "--hepl (did you mean --help?)"),
]


@pytest.mark.parametrize("job, typo, hint", TYPOS, ids=[f"{job}{typo[0]}" for job, typo, _ in TYPOS])
def test_every_job_suggests_the_closest_of_its_own_flags(job, typo, hint, tmp_path, capsys):
    base = {"preprocess": ["--output", str(tmp_path / "out")], "train": ["--data", str(tmp_path), "--output", "x"],
            "train_tokenizer": ["--input", str(tmp_path), "--output", str(tmp_path / "tok")],
            "publish": [str(tmp_path), "--repo_id", "a/b"]}.get(job, [str(tmp_path)])
    with pytest.raises(SystemExit) as error:
        importlib.import_module(f"jobs.{job}").run([*base, *typo])
    err = capsys.readouterr().err
    assert error.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"error: unrecognized arguments: {hint}" in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "tok").exists()


_IMPORTS = """
import sys
from jobs.{job} import run
try:
    run({argv!r})
except SystemExit as stop:
    print(stop.code, sorted(name for name in ("apache_beam", "torch", "transformers") if name in sys.modules))
"""


@pytest.mark.parametrize("job, argv, message", [
    ("preprocess", ["--input", "/nonexistent/books", "--output", "OUT"], "--input '/nonexistent/books' matches no file"),
    ("preprocess", ["--input", "/nonexistent/*.txt", "--output", "OUT"], "--input '/nonexistent/*.txt' matches no file"),
    ("preprocess", ["--output", "OUT", "--tokenizer", "./no/tokenizer.json"],
     "tokenizer path './no/tokenizer.json' does not exist"),
    ("train", ["--data", "/nonexistent/data", "--output", "OUT"], "--data '/nonexistent/data' does not exist"),
    ("train_tokenizer", ["--input", "/nonexistent/books", "--output", "OUT"],
     "--input '/nonexistent/books' matches no file"),
])
def test_a_bad_path_is_named_before_any_heavy_import(job, argv, message, tmp_path):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    done = subprocess.run([sys.executable, "-c", _IMPORTS.format(job=job, argv=argv)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.stdout.strip() == "2 []", (done.stdout, done.stderr)
    assert f"python -m jobs.{job}: error: {message}" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def _option_helps(text: str) -> dict[str, str]:
    """Each option of a --help page with its help text, joined onto one line."""
    options, current = {}, None
    for line in text.split("options:", 1)[1].splitlines():
        found = re.match(r"^  (-\S+(?:, --\S+)?)(?: \S+)?(?:\s{2,}(.*))?$", line)
        if found:
            current = found.group(1).split(", ")[-1]
            options[current] = found.group(2) or ""
        elif current and line.strip():
            options[current] += " " + line.strip()
    return options


@pytest.mark.parametrize("job", ["preprocess", "train", "train_tokenizer", "publish", "validate", "report",
                                 "inspect_output"])
def test_every_option_states_its_default_once(job, capsys):
    with pytest.raises(SystemExit):
        importlib.import_module(f"jobs.{job}").run(["--help"])
    helps = _option_helps(capsys.readouterr().out)
    assert helps, "no options found"
    doubled = {flag: text for flag, text in helps.items() if text.lower().count("default") > 1 or "(default: None)" in text}
    assert not doubled, doubled
    if job == "train":
        assert helps["--model"].endswith("default: a new model")
        # the flag keeps full-length batches: its help must say so, not describe trimming as on
        assert helps["--no_trim_padding"].startswith("keep every batch at the data's full sequence length"), helps


def test_maskbeam_help_has_a_line_on_each_job(capsys):
    from jobs.cli import JOBS, main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for job in JOBS:
        line = next((line for line in out.splitlines() if line.split()[:1] == [job]), "")
        assert len(line.split()) >= 5, f"no description of {job}:\n{out}"


def test_publish_refuses_a_dry_run_folder_as_the_jobs_refuse_an_output(one_book, tmp_path, capsys):
    """`publish: '/x' exists and is not empty`: another format than the other jobs' errors, and no hint."""
    from jobs.publish import run

    def dry_run(folder, *extra: str) -> str:
        return run([str(one_book), "--repo_id", "someone/books", "--license", "cc0-1.0", "--dry_run", str(folder),
                    *extra])

    fresh, again = tmp_path / "fresh", tmp_path / "again"
    dry_run(fresh)
    dry_run(again)
    (again / "notes.txt").write_text("mine")
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        dry_run(again)
    err = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"python -m jobs.publish: error: --dry_run '{again}' exists and is not empty (an earlier "
                          "dry run); pass --overwrite to replace it") and err.endswith("(--help lists every option)")
    (again / "data" / "stale-00009-of-00009.parquet").write_bytes(b"stale")
    dry_run(again, "--overwrite")
    files = lambda folder: {p.relative_to(folder).as_posix(): p.read_bytes()  # noqa: E731
                            for p in folder.rglob("*") if p.is_file()}
    assert files(again) == {**files(fresh), "notes.txt": b"mine"}  # the stale file is gone, the user's kept
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("keep")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit):
            dry_run(foreign, *extra)
        assert "is not an earlier dry run" in capsys.readouterr().err
    assert files(foreign) == {"keep.txt": b"keep"}


def test_resume_says_in_one_line_what_it_reuses(tmp_path, caplog):
    """--resume said nothing of what it took over from the earlier run."""
    from pipeline.sample import SAMPLE_BOOKS
    from schemas import manifest as m
    from tests.conftest import run_preprocess

    out = tmp_path / "out"
    args = ("--num_shards", "3", "--max_seq_length", "64", "--validation_fraction", "0.05")
    run_preprocess([SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"], out, *args)
    shards = sorted((out / m.TRAIN).glob("data-*.arrow")) + sorted((out / m.VALIDATION).glob("data-*.arrow"))
    shards[0].write_bytes(shards[0].read_bytes()[:100])  # damaged: rebuilt, the others are kept
    with caplog.at_level("INFO", logger="maskbeam"):
        run_preprocess([SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"], out, *args, "--resume")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--resume:")]
    # a finished output keeps no unit results: its one input is redone, its good shards kept
    assert lines == [f"--resume: 0 of 1 input reused from the earlier run, 1 to redo; {len(shards) - 1} finished "
                     "shards found, each kept if its plan and checksum still match"], caplog.text
