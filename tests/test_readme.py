"""The README's Python blocks run as written, in order, against small outputs made by the README's
own commands (on the small books): a user who copies them gets what the README says."""

from __future__ import annotations

import re
import warnings

import pytest

from schemas import manifest as m
from tests.conftest import REPO, run_preprocess

pytestmark = pytest.mark.slow
HUB_REPO = "USER/books-mlm-512"  # the one snippet that needs the Hub reads the --dry_run folder instead


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run_in_order(small_books, tmp_path, monkeypatch):
    from jobs.publish import run as publish

    monkeypatch.chdir(tmp_path)
    run_preprocess([small_books], "out/books-mlm-512")
    run_preprocess([small_books], "out/books-mlm-512-dynamic", "--masking", "dynamic")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "--dry_run upload/" in readme
    publish(["out/books-mlm-512", "--repo_id", HUB_REPO, "--dry_run", "upload/"])
    blocks = python_blocks(readme)
    assert len(blocks) >= 4
    namespace: dict = {"__name__": "readme"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for block in blocks:
            code = block.replace(f'"{HUB_REPO}"', '"upload"')
            exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README is ours
    # a user who copies the snippets sees no warning from torch (e.g. more DataLoader workers than cores)
    from_torch = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if "torch" in w.filename.replace("\\", "/")]
    assert not from_torch, from_torch
    assert namespace["ds"]["train"].num_rows == namespace["dd"]["train"].num_rows
    assert namespace["trainer"].state.global_step == 2  # the dynamic Trainer snippet trained
    assert (tmp_path / "out/books-mlm-512" / m.MANIFEST_FILE).exists()
