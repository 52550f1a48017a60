"""What held (issue 26): no file MaskBeam reads is executed. The package's source holds no call that
turns data into code (eval, exec, pickle, marshal, yaml.load, shelve, a shell); the two dynamic
imports take their module name from the command line, never from a file. (`torch.load` of a
checkpoint is the trainer's: `tests/jobs/test_train.py` proves it loads weights only.)"""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "pickle.load", "pickle.loads", "cPickle.load",
                   "marshal.load", "marshal.loads", "yaml.load", "yaml.unsafe_load", "yaml.full_load",
                   "shelve.open", "os.system", "os.popen", "dill.load", "dill.loads", "cloudpickle.load",
                   "cloudpickle.loads", "runpy.run_path", "runpy.run_module", "jsonpickle.decode"}
# module -> dynamic imports it may make, and why the name is not data
ALLOWED_IMPORTS = {
    "jobs/cli.py": 1,  # the job name, checked against the fixed JOBS tuple first
    "pipeline/beam/run/runner_options.py": 2,  # --runner given as a dotted path on the command line (its options, its check)
    "pipeline/beam/run/beam_import.py": 2,  # the real beartype / requests, httplib2, boto3 behind a stand-in: names from its fixed tables
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def _calls(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, _name(node.func)


def test_no_call_turns_data_into_code():
    found, dynamic = [], {}
    sources = [p for folder in ("pipeline", "jobs", "schemas") for p in (REPO / folder).rglob("*.py")]
    assert len(sources) > 40
    for path in sources:
        relative = path.relative_to(REPO).as_posix()
        for node, name in _calls(path):
            short = name.split(".", 1)[-1] if name.startswith(("np.", "numpy.")) else name
            if name in FORBIDDEN_CALLS:
                found.append(f"{relative}:{node.lineno} {name}")
            if short == "load" and any(k.arg == "allow_pickle" and getattr(k.value, "value", False) for k in node.keywords):
                found.append(f"{relative}:{node.lineno} {name}(allow_pickle=True)")
            if any(k.arg == "shell" and getattr(k.value, "value", False) for k in node.keywords):
                found.append(f"{relative}:{node.lineno} {name}(shell=True)")
            if name.endswith("import_module"):
                dynamic[relative] = dynamic.get(relative, 0) + 1
    assert not found, found
    assert dynamic == ALLOWED_IMPORTS


def test_a_packed_value_builds_the_jobs_records_and_nothing_else():
    """The job's shuffle values and temp-folder spills (`pipeline.beam.packed`) come back whole, and
    a planted file naming any other callable is refused before anything runs."""
    import os
    import pickle

    from pipeline.beam.packed import PackedValueRefused, pack, unpack
    from pipeline.beam.writing.sharding import PartSlice

    records = [("key", "src", (("train", "p.arrow", 3, 0),)), {"a": [1, 2.5, None, b"x"]}]
    assert unpack(pack(records)) == records
    planted = [pickle.dumps(os.system), pickle.dumps(PartSlice.__init__), pickle.dumps(eval)]
    for blob in planted:
        with pytest.raises(PackedValueRefused, match="never packs"):
            unpack(blob)
