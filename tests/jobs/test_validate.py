"""jobs.validate on real outputs, and on outputs broken in each way users meet."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from schemas import manifest as m
from tests.conftest import run_preprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def good(small_books, tmp_path_factory):
    base = tmp_path_factory.mktemp("validate")
    run_preprocess([small_books], base / "static", "--num_shards", "2", "--dupe_factor", "2")
    run_preprocess([small_books], base / "dynamic", "--num_shards", "2", "--masking", "dynamic")
    return base


def _validate(path, capsys):
    from jobs.validate import run

    code = run([str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_valid_outputs_pass(good, capsys, mode):
    code, text = _validate(good / mode, capsys)
    rows = json.loads((good / mode / m.MANIFEST_FILE).read_text())[m.KEY_COUNTS][m.ROWS]
    copies = 2 if mode == "static" else 1
    assert code == 0 and text.startswith("OK:") and f"{rows * copies} rows" in text, text


def _copy(good, tmp_path, mode="static"):
    target = tmp_path / mode
    shutil.copytree(good / mode, target)
    return target


def test_truncated_shard(good, tmp_path, capsys):
    out = _copy(good, tmp_path)
    shard = out / m.TRAIN / "data-00001-of-00002.arrow"
    shard.write_bytes(shard.read_bytes()[:-1000])
    code, text = _validate(out, capsys)
    assert code == 1 and "data-00001-of-00002.arrow" in text and "truncated" in text and "Traceback" not in text


def test_bit_flipped_shard(good, tmp_path, capsys):
    out = _copy(good, tmp_path, "dynamic")
    shard = out / m.TRAIN / "data-00000-of-00002.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    code, text = _validate(out, capsys)
    assert code == 1 and "data-00000-of-00002.arrow" in text and "sha256" in text


def test_missing_and_unlisted_shards(good, tmp_path, capsys):
    out = _copy(good, tmp_path)
    (out / m.TRAIN / "data-00000-of-00002.arrow").unlink()
    code, text = _validate(out, capsys)
    assert code == 1 and "missing" in text
    out = _copy(good, tmp_path / "second")
    shutil.copy(out / m.TRAIN / "data-00000-of-00002.arrow", out / m.TRAIN / "data-00005-of-00009.arrow")
    code, text = _validate(out, capsys)
    assert code == 1 and "not in the manifest" in text


def test_an_edited_or_missing_inputs_file(good, tmp_path, capsys):
    out = _copy(good, tmp_path)
    inputs = out / m.INPUTS_FILE
    lines = inputs.read_text().splitlines(keepends=True)
    entry = json.loads(lines[0])
    entry[m.TOKENS] += 1  # one input's count changed, the manifest untouched
    inputs.write_text(m.input_line(entry.pop(m.KEY_SECTION), entry) + "".join(lines[1:]))
    code, text = _validate(out, capsys)
    assert code == 1 and text.startswith("INVALID:") and m.INPUTS_FILE in text and "sha256" in text, text
    inputs.write_text("".join(lines[1:]))  # a line gone, the manifest made to describe the file
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    manifest[m.KEY_INPUTS_FILE].update({m.KEY_BYTES: inputs.stat().st_size,
                                        m.KEY_SHA256: hashlib.sha256(inputs.read_bytes()).hexdigest()})
    (out / m.MANIFEST_FILE).write_text(json.dumps(manifest))
    code, text = _validate(out, capsys)
    assert code == 1 and "lines per section" in text and "Traceback" not in text, text
    inputs.unlink()
    code, text = _validate(out, capsys)
    assert code == 1 and f"{m.INPUTS_FILE}: missing" in text, text


def test_an_output_of_version_1_is_still_read(good, tmp_path, capsys):
    """Its entries inside manifest.json, no INPUTS_FILE: validate, inspect_output and the loaders read it."""
    from pipeline.consumers.outputs import manifest_with_inputs

    out = _copy(good, tmp_path)
    manifest = manifest_with_inputs(str(out))
    del manifest[m.KEY_INPUTS_FILE]
    manifest[m.KEY_VERSION] = m.OLDEST_MANIFEST_VERSION
    (out / m.MANIFEST_FILE).write_text(m.dumps(manifest))
    (out / m.INPUTS_FILE).unlink()
    code, text = _validate(out, capsys)
    assert code == 0 and text.startswith("OK:"), text
    assert manifest_with_inputs(str(out)) == manifest


def test_content_checks_catch_a_rewritten_shard(good, tmp_path, capsys):
    """A shard rewritten with consistent checksums but a special token as a target is still caught."""
    import hashlib

    import pyarrow as pa

    from pipeline.beam.writing.arrow_io import fixed_list_array, fixed_list_to_numpy

    out = _copy(good, tmp_path)
    shard = out / m.TRAIN / "data-00000-of-00002.arrow"
    table = pa.ipc.open_stream(shard.read_bytes()).read_all()
    labels = fixed_list_to_numpy(table.column("labels"), 512).copy()
    labels[0, 0] = 101  # [CLS] as a target
    table = table.set_column(2, table.schema.field(2), fixed_list_array(labels))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    shard.write_bytes(data)
    manifest = json.loads((out / m.MANIFEST_FILE).read_text())
    entry = manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS][0]
    entry[m.KEY_SHA256], entry[m.KEY_BYTES] = hashlib.sha256(data).hexdigest(), len(data)
    (out / m.MANIFEST_FILE).write_text(json.dumps(manifest))
    code, text = _validate(out, capsys)
    assert code == 1 and "special token is a target" in text, text


def test_not_an_output(tmp_path, capsys):
    code, text = _validate(tmp_path, capsys)
    assert code == 1 and "manifest.json" in text
    code, text = _validate(tmp_path / "nonexistent", capsys)  # issue 25: said "has no manifest.json"
    assert code == 1 and "does not exist" in text and "manifest.json" not in text


def test_maskbeam_console_script_dispatches_to_jobs(good, capsys):
    from jobs.cli import main

    with pytest.raises(SystemExit) as exit_code:
        main(["validate", str(good / "static")])
    assert exit_code.value.code is None or exit_code.value.code == 0
    assert capsys.readouterr().out.startswith("OK:")
    with pytest.raises(SystemExit) as exit_code:
        main(["no_such_job"])
    assert exit_code.value.code == 2
