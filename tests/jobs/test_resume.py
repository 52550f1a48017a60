"""Crash safety and --resume: a real run is killed part-way and resumed to the same bytes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from schemas import manifest as m
from tests.conftest import BOOKS, REPO, TOKENIZER_DIR, run_preprocess

pytestmark = pytest.mark.slow
ARGS = ["--num_shards", "24", "--dupe_factor", "4", "--validation_fraction", "0.05"]


def _hashes(out):
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def _final_shards(out):
    return [p for p in (out / m.TRAIN).glob("data-*.arrow")] if (out / m.TRAIN).exists() else []


def _kill_after_first_shard(out) -> None:
    argv = [sys.executable, "-m", "jobs.preprocess", "--input", str(BOOKS), "--output", str(out),
            "--tokenizer", str(TOKENIZER_DIR), *ARGS]
    proc = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not _final_shards(out):
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its worker processes, at once
    proc.wait()


def test_killed_run_resumes_to_identical_bytes(tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    run_preprocess([BOOKS], clean, *ARGS)
    _kill_after_first_shard(killed)
    finals = _final_shards(killed)
    assert finals, "no shard was final when the run was killed"
    assert not (killed / m.MANIFEST_FILE).exists(), "the run finished before it could be killed"
    expected = _hashes(clean)
    for shard in finals:  # whatever is under a final name is complete
        assert expected[shard.relative_to(killed).as_posix()] == hashlib.sha256(shard.read_bytes()).hexdigest()
    run_preprocess([BOOKS], killed, *ARGS, "--resume")
    got = _hashes(killed)
    assert {k: v for k, v in got.items() if k != m.MANIFEST_FILE} == \
        {k: v for k, v in expected.items() if k != m.MANIFEST_FILE}
    a = json.loads((clean / m.MANIFEST_FILE).read_text())
    b = json.loads((killed / m.MANIFEST_FILE).read_text())
    a[m.KEY_CONFIG]["output"] = b[m.KEY_CONFIG]["output"]
    assert a == b


def test_resume_refuses_another_config_and_skips_a_complete_output(tmp_path, capsys):
    out = tmp_path / "out"
    book = BOOKS / "classics__yellow_wallpaper.txt"
    with pytest.raises(SystemExit):
        run_preprocess([book], out, "--resume")
    assert "no earlier run" in capsys.readouterr().err
    run_preprocess([book], out, "--seed", "3")
    with pytest.raises(SystemExit):
        run_preprocess([book], out, "--seed", "4", "--resume")
    assert "--seed: was 3, now 4" in capsys.readouterr().err
    before = _hashes(out)
    assert run_preprocess([book], out, "--seed", "3", "--resume") is None
    assert _hashes(out) == before
    shard = out / m.TRAIN / "data-00000-of-00001.arrow"
    shard.write_bytes(shard.read_bytes()[:100])  # damage it: resume rebuilds only what does not check out
    run_preprocess([book], out, "--seed", "3", "--resume")
    assert _hashes(out) == before
