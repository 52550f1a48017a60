"""The README and `docs/*.md` say what the code does: the README's user path runs as written (its
placeholders filled in), every Python block of every page runs in order, and every link, test
reference and install extra they name exists. A user who copies them gets what they say."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pipeline.sample import SAMPLE_BOOKS
from schemas import manifest as m
from tests.conftest import REPO, TOKENIZER_DIR, run_preprocess

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
HUB_REPO = "USER/NAME"  # the snippets that need the Hub read the --dry_run folder instead
NOT_RUN = "needs the Hub"  # a command of the user path with this comment is shown, not run
USER_PATH_HEADING = "## From your books"
# What the placeholders of the user path stand for in the test: the embedded sample's books and
# tokenizer (so the test runs without ../shared), a licence id, and a two-step training run.
PLACEHOLDERS = {"TOKENIZER": str(TOKENIZER_DIR), "LICENSE": "cc0-1.0"}
TRAIN_STEPS = ["--max_steps", "2"]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def user_path_commands(readme: str) -> tuple[list[list[str]], list[str]]:
    """The commands of the README's user path (its first bash block after the heading), as argv lists,
    and the lines marked as not run."""
    section = readme[readme.index(USER_PATH_HEADING):]
    block = code_blocks(section, "bash")[0]
    commands, shown = [], []
    for line in block.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if NOT_RUN in line:
            shown.append(line)
            continue
        commands.append([PLACEHOLDERS.get(word, word) for word in shlex.split(line, comments=True)])
    return commands, shown


def _run_python_blocks(page: Path, namespace: dict) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in code_blocks(page.read_text(encoding="utf-8"), "python"):
            code = block.replace(f'"{HUB_REPO}"', '"upload"')
            exec(compile(code, str(page.relative_to(REPO)), "exec"), namespace)  # noqa: S102 - our own pages
    # a user who copies the snippets sees no warning from torch (e.g. more DataLoader workers than cores)
    from_torch = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if "torch" in w.filename.replace("\\", "/")]
    assert not from_torch, from_torch


def _job_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.mark.slow
def test_readme_user_path_runs_from_books_to_a_model_and_an_upload_folder(tmp_path, monkeypatch):
    """The first screen's commands, one process each as a user types them (`maskbeam` is
    `python -m jobs.cli`), on a BOOKS/ folder of the embedded sample; then the README's Python."""
    readme = README.read_text(encoding="utf-8")
    commands, shown = user_path_commands(readme)
    jobs = [argv[1] for argv in commands]
    assert jobs == ["preprocess", "validate", "inspect", "train", "publish"], commands
    assert len(shown) == 1 and "maskbeam publish" in shown[0] and "--dry_run" not in shown[0]
    shutil.copytree(SAMPLE_BOOKS, tmp_path / "BOOKS")
    for argv in commands:
        assert argv[0] == "maskbeam", argv
        extra = TRAIN_STEPS if argv[1] == "train" else []
        done = subprocess.run([sys.executable, "-m", "jobs.cli", *argv[1:], *extra], cwd=tmp_path, env=_job_env(),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shlex.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if argv[1] == "validate":
            assert done.stdout.startswith("OK: "), done.stdout
        if argv[1] == "inspect":
            assert done.stdout.rstrip().endswith("True"), done.stdout[-500:]
    assert (tmp_path / "OUT" / m.MANIFEST_FILE).is_file()
    assert (tmp_path / "runs" / "first" / "config.json").is_file()  # the trained model, save_pretrained
    assert (tmp_path / "upload" / "README.md").is_file()  # the dataset card of the --dry_run folder

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    _run_python_blocks(README, namespace)
    assert namespace["ds"]["train"].num_rows == namespace["dd"]["train"].num_rows > 0


@pytest.mark.slow
def test_docs_python_blocks_run_in_order(tmp_path, monkeypatch):
    """Each page of docs/ in a namespace of its own, against OUT/ (static) and OUT-dynamic/ made from
    the embedded sample, and upload/ (publish --dry_run of OUT/). Rows of 128 tokens, not 512: the
    snippets' HF Trainer steps project every position onto the vocabulary (4x fewer positions), and
    nothing they show depends on the row length."""
    from jobs.publish import run as publish

    monkeypatch.chdir(tmp_path)
    run_preprocess([SAMPLE_BOOKS], "OUT/", "--max_seq_length", "128")
    run_preprocess([SAMPLE_BOOKS], "OUT-dynamic/", "--masking", "dynamic", "--max_seq_length", "128")
    publish(["OUT/", "--repo_id", HUB_REPO, "--dry_run", "upload/"])
    ran = {}
    for page in DOCS:
        if code_blocks(page.read_text(encoding="utf-8"), "python"):
            ran[page.name] = namespace = {"__name__": page.stem}
            _run_python_blocks(page, namespace)
    assert {"output.md", "training.md"} <= ran.keys(), ran.keys()
    assert ran["output.md"]["ds"]["train"].num_rows == ran["output.md"]["dd"]["train"].num_rows
    assert ran["training.md"]["trainer"].state.global_step == 2  # the dynamic Trainer snippet trained
    assert ran["training.md"]["state"]  # the loader's state after three epochs


def test_readme_install_and_test_commands():
    """The first screen installs the user's extras after the CPU-torch line; the Development section
    has the commands .ci/run runs."""
    readme = README.read_text(encoding="utf-8")
    install = readme.index('pip install -e ".[train,publish]"')
    assert readme.index("download.pytorch.org/whl/cpu") < install
    assert readme.index("## Install") < install < readme.index(USER_PATH_HEADING)
    development = readme[readme.index("## Development"):]
    ci = (REPO / ".ci" / "run").read_text()
    for command in ('pip install -e ".[dev]"', "python -m pytest"):
        assert command in development and command in ci, command


def test_readme_names_every_install_extra():
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    extras = [name for name in config["options.extras_require"]]
    readme = README.read_text(encoding="utf-8")
    missing = [name for name in extras if f"`{name}`" not in readme]
    assert not missing, f"extras of setup.cfg the README does not name: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_test_references_resolve(page):
    """Every relative link (and its #anchor) leads to a file and heading that exist, and every test a
    page names (`tests/...py` or `tests/...py::test_name`) exists: a guarantee names a real test."""
    text = page.read_text(encoding="utf-8")
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"link {target}: no {file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            bad.append(f"link {target}: no heading #{anchor} in {file.name}")
    for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", text):
        file = REPO / path
        if not file.is_file():
            bad.append(f"{path}: no such test file")
        elif name and not re.search(rf"def {name}\b", file.read_text(encoding="utf-8")):
            bad.append(f"{path}::{name}: no such test")
    assert not bad, bad
