"""Crafted output folders (a colleague's run, a download): each finding of issue 26 that concerns an
output, reproduced on a copy of one small real output, tampered as an attacker would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from huggingface_hub import HfApi
from markdown_it import MarkdownIt

from pipeline.beam.writing.arrow_io import fixed_list_array
from pipeline.consumers.outputs import (
    BadManifest,
    NotAnOutput,
    ShardMismatch,
    load_manifest,
    manifest_with_inputs,
    shard_paths,
)
from pipeline.consumers.publish import PublishError, publish_streaming
from pipeline.storage.arrow_files import fixed_list_to_numpy
from schemas import manifest as m
from schemas.shard import INPUT_IDS, LABELS
from tests.conftest import REPO, run_preprocess
from tests.schemas.test_manifest import valid
from tests.security.conftest import (
    FLAGS,
    SECRET,
    copy_output,
    describe,
    read_manifest,
    write_inputs,
    write_manifest,
)

pytestmark = pytest.mark.slow
TOKEN = "hf_PUBLISHtokenPUBLISHtoken0123456789"
SHARD0 = m.shard_name(0, 1)


def _secret_file(tmp_path: Path) -> tuple[Path, bytes]:
    secret = tmp_path / "home" / ".env"
    secret.parent.mkdir(parents=True)
    data = f"HF_TOKEN={SECRET}\nAWS_SECRET_ACCESS_KEY={SECRET}\n".encode()
    secret.write_bytes(data)
    return secret, data


def _train_entry(manifest: dict) -> dict:
    return manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_SHARDS][0]


def _craft(tiny, tmp_path: Path, how: str) -> tuple[Path, bytes]:
    """An output whose first train shard leads to a file holding a secret."""
    out = copy_output(tiny, tmp_path / "a" / "b" / "out")
    secret, data = _secret_file(tmp_path)
    manifest = read_manifest(out)
    entry, shard = _train_entry(manifest), out / m.TRAIN / SHARD0
    if how in ("relative", "absolute"):  # the name leads out; size and sha256 even describe the secret
        entry[m.KEY_FILENAME] = os.path.relpath(secret, shard.parent) if how == "relative" else str(secret)
        describe(entry, data)
    elif how == "symlink":  # the name is ours, the file a link to the secret (its sha256 is unknown)
        shard.unlink()
        shard.symlink_to(secret)
    elif how == "swapped":
        shard.write_bytes(data)
    write_manifest(out, manifest)
    return out, data


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink", "swapped"])
def test_publish_never_ships_a_file_the_manifest_points_outside(tiny, tmp_path, how, capsys):
    """Finding 2: `jobs.publish` copied `../../.env` or `/abs/.env` into the upload (with --format
    arrow into the --dry_run folder, and to the Hub client)."""
    from jobs.publish import run

    out, secret = _craft(tiny, tmp_path, how)
    folder = tmp_path / "dry"
    with pytest.raises(SystemExit) as exit_code:
        run([str(out), "--repo_id", "someone/books", "--dry_run", str(folder), "--format", "arrow",
             "--license", "cc0-1.0"])
    assert exit_code.value.code == 1
    err = capsys.readouterr().err
    assert ("filename" in err if how in ("relative", "absolute") else SHARD0 in err), err
    for path in folder.rglob("*") if folder.exists() else []:
        assert not path.is_file() or SECRET.encode() not in path.read_bytes()

    received: list[bytes] = []

    def keep(*args, **kwargs):
        for op in kwargs.get("additions", []) + kwargs.get("operations", []):
            content = op.path_or_fileobj
            received.append(Path(content).read_bytes() if isinstance(content, str) else bytes(content))

    api = mock.create_autospec(HfApi, instance=True)
    api.preupload_lfs_files.side_effect = keep
    api.create_commit.side_effect = keep
    with pytest.raises((PublishError, NotAnOutput)):
        publish_streaming(str(out), "someone/books", fmt="arrow", token=TOKEN, api=api, sleep=lambda s: None)
    assert not any(SECRET.encode() in data for data in received)
    api.create_commit.assert_not_called()


def test_shard_paths_never_leave_an_object_store_prefix():
    """An absolute name joined onto `s3://bucket/out/train` must not replace the whole URL."""
    manifest = valid()
    assert shard_paths("s3://bucket/out", manifest, m.TRAIN) == [
        f"s3://bucket/out/train/{m.shard_name(i, 2)}" for i in range(2)]
    _train_entry(manifest)[m.KEY_FILENAME] = "/home/me/.aws/credentials"
    with pytest.raises(m.ManifestError):
        shard_paths("s3://bucket/out", manifest, m.TRAIN)


def _rewrite_shard(out: Path, change) -> None:
    """Rewrite the first train shard with `change(table) -> table`, and make the manifest describe it."""
    shard = out / m.TRAIN / SHARD0
    table = change(pa.ipc.open_stream(shard.read_bytes()).read_all())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    shard.write_bytes(data)
    manifest = read_manifest(out)
    describe(_train_entry(manifest), data)
    write_manifest(out, manifest)


def _card_html(card: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(card.split("---\n", 2)[2])


def test_card_shows_input_names_and_reasons_as_text(tiny, tmp_path):
    """Finding 10: a heading, a link and an `<img onerror>` in input names and skip reasons reached the
    card's Markdown raw."""
    from jobs.publish import run

    out = copy_output(tiny, tmp_path / "out")
    manifest = manifest_with_inputs(str(out))
    evil = "x.txt\n\n# Hacked\n[click here](https://evil.example) <img src=x onerror=alert(1)> ``|`` | *"
    manifest[m.KEY_INPUTS][0][m.KEY_PATH] = "books/" + evil
    manifest[m.KEY_SKIPPED] = [{m.KEY_PATH: "books/b.txt", m.KEY_REASON: evil, m.KEY_SIZE: 1}]
    manifest[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH] = "<img src=x onerror=alert(2)>"
    write_inputs(out, manifest)
    run([str(out), "--repo_id", "someone/books", "--dry_run", str(tmp_path / "dry"), "--license", "cc0-1.0"])
    page = _card_html((tmp_path / "dry" / "README.md").read_text())
    assert "<img" not in page and "<a " not in page and "Hacked</h1>" not in page, page
    assert page.count("<h1>") == 1  # the repository's own heading
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # shown, as text
    for table in re.findall(r"<table>.*?</table>", page, re.S):  # a `|` in a name splits no cell
        header, body = table.split("</thead>")
        assert all(row.count("<td>") == header.count("<th>") for row in body.split("</tr>")[:-1]), table


def test_publish_refuses_foreign_columns(tiny, tmp_path, capsys):
    """Column names reach the card's features: a shard with other columns is not ours to publish."""
    from jobs.publish import run

    out = copy_output(tiny, tmp_path / "out")
    _rewrite_shard(out, lambda t: t.append_column("<img src=x onerror=alert(1)>", pa.array([0] * t.num_rows)))
    with pytest.raises(SystemExit):
        run([str(out), "--repo_id", "someone/books", "--dry_run", str(tmp_path / "dry"), "--license", "cc0-1.0"])
    assert "shard columns" in capsys.readouterr().err
    assert not (tmp_path / "dry" / "README.md").exists()


def test_report_refuses_a_string_seed_and_escapes_every_field(tiny, tmp_path):
    """Finding 3: `"seed": "0 <script>...</script>"` appeared verbatim in report.html."""
    from jobs.report import run
    from pipeline.consumers.report import SplitStats, write_html

    out = copy_output(tiny, tmp_path / "out")
    manifest = read_manifest(out)
    manifest[m.KEY_CONFIG]["seed"] = "0 <script>alert(1)</script>"
    write_manifest(out, manifest)
    with pytest.raises(SystemExit):
        run([str(out), "--html", str(tmp_path / "report.html")])
    assert not (tmp_path / "report.html").exists()
    # every string field a valid manifest may hold is escaped
    manifest = manifest_with_inputs(str(copy_output(tiny, tmp_path / "valid")))
    del manifest[m.KEY_INPUTS_FILE]  # the entries in the manifest, as a version-1 manifest holds them
    manifest[m.KEY_VERSION] = m.OLDEST_MANIFEST_VERSION
    script = "<script>alert(1)</script>"
    manifest[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH] = script
    manifest[m.KEY_SKIPPED] = [{m.KEY_PATH: f"b/{script}", m.KEY_REASON: script}]
    manifest[m.KEY_NEAR_DUPLICATES] = [{m.KEY_PATH: script, m.KEY_NEAR_DUPLICATE_OF: script, m.KEY_SIMILARITY: 0.7}]
    manifest[m.KEY_COUNTS][m.FILES_SKIPPED_BY_REASON] = {script: 1}
    manifest[m.KEY_CONFIG]["scripts"] = [script]
    m.validate_manifest(manifest)
    write_html(manifest, {}, SplitStats(), str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text()
    assert "<script" not in page and page.count("&lt;script&gt;alert(1)") == 4  # name, reason, by reason, scripts


def _forge_int32_labels(out: Path, label: int) -> None:
    """A vocabulary over 32,767 ids (int32 shards) and one label far outside it, checksums consistent."""
    def change(table):
        ids = fixed_list_to_numpy(table.column(INPUT_IDS), 32).astype(np.int32)
        labels = fixed_list_to_numpy(table.column(LABELS), 32).astype(np.int32)
        labels[0, 1] = label
        return pa.table({INPUT_IDS: fixed_list_array(ids), "attention_mask": table.column("attention_mask"),
                         LABELS: fixed_list_array(labels)})

    manifest = read_manifest(out)
    manifest[m.KEY_TOKENIZER][m.KEY_VOCAB_SIZE], manifest[m.KEY_TOKENIZER]["id_dtype"] = 40_000, "int32"
    write_manifest(out, manifest)
    _rewrite_shard(out, change)


@pytest.mark.parametrize("how", ["vocab_size", "rows", "label"])
def test_manifest_numbers_never_size_an_allocation(tiny, tmp_path, how, capsys):
    """Finding 7: vocab_size 2e9 (14.9 GiB of tables), a shard of 5e9 rows, a label of 2e9 (the
    report's bincount asked 14.9 GiB) are refused before anything is allocated (peak below 64 MB).
    Not run without the checks: it would take the machine's memory."""
    from jobs.validate import run as validate
    from pipeline.consumers.report import collect

    out = copy_output(tiny, tmp_path / "out")
    manifest = read_manifest(out)
    if how == "vocab_size":
        manifest[m.KEY_TOKENIZER][m.KEY_VOCAB_SIZE] = 2_000_000_000
    elif how == "rows":
        _train_entry(manifest)[m.KEY_ROWS] = 5_000_000_000
    write_manifest(out, manifest)
    if how == "label":
        _forge_int32_labels(out, 2_000_000_000)
    tracemalloc.start()
    try:
        with pytest.raises((BadManifest, ShardMismatch), match="vocab_size|rows|outside"):
            collect(str(out))
        assert validate([str(out)]) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
    assert ("outside" if how == "label" else how) in capsys.readouterr().err


def test_a_fifo_in_place_of_a_shard_is_refused_not_waited_on(tiny, tmp_path, capsys):
    from jobs.validate import run as validate

    out = copy_output(tiny, tmp_path / "out")
    (out / m.TRAIN / SHARD0).unlink()
    os.mkfifo(out / m.TRAIN / SHARD0)
    assert validate([str(out)]) == 1 and "not a regular file" in capsys.readouterr().err
    with pytest.raises(PublishError, match="not a regular file"):
        publish_streaming(str(out), "someone/books", token=TOKEN, api=mock.create_autospec(HfApi, instance=True))


def test_overwrite_never_deletes_a_folder_that_is_not_ours(tiny, tmp_path, capsys):
    """Finding 9: any manifest.json passed; `{"name": "my web app"}` with train/ and validation/ was deleted."""
    site = tmp_path / "site"
    for name in (m.TRAIN, m.VALIDATION):
        (site / name).mkdir(parents=True)
        (site / name / "index.html").write_text("<h1>mine</h1>")
    (site / m.MANIFEST_FILE).write_text('{"name": "my web app"}')
    (site / m.TEMP_DIR).mkdir()
    (site / m.TEMP_DIR / m.RUN_FILE).write_text('{"name": "not a run"}')
    before = sorted((p.relative_to(site), p.read_bytes()) for p in site.rglob("*") if p.is_file())
    with pytest.raises(SystemExit):
        run_preprocess([tiny["books"]], site, "--overwrite", *FLAGS)
    assert "not a MaskBeam output" in capsys.readouterr().err
    assert sorted((p.relative_to(site), p.read_bytes()) for p in site.rglob("*") if p.is_file()) == before


def test_resume_on_a_foreign_output_writes_nothing_outside_it(tiny, tmp_path, capsys):
    """Finding 12: --resume on a finished output with a shard that does not check out writes a record
    per good shard, named after the manifest's filename: `../../../planted/...` landed outside."""
    out = copy_output(tiny, tmp_path / "deep" / "er" / "out")
    manifest = read_manifest(out)
    escape = "../../../../planted/" + SHARD0
    planted = os.path.normpath(out / m.TRAIN / escape)  # the shard the crafted name points at checks out
    os.makedirs(os.path.dirname(planted))
    Path(planted).write_bytes((out / m.TRAIN / SHARD0).read_bytes())
    _train_entry(manifest)[m.KEY_FILENAME] = escape
    write_manifest(out, manifest)
    (out / m.VALIDATION / SHARD0).unlink()  # something to redo, so records are written
    outside_before = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    with pytest.raises(SystemExit):
        run_preprocess([tiny["books"]], out, "--resume", *FLAGS)
    assert "filename" in capsys.readouterr().err
    assert sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out) == outside_before
    assert not (out / m.TEMP_DIR).exists()


def test_no_secret_in_logs_or_outputs(tiny):
    """What held: HF_TOKEN in the environment and --s3_secret_access_key on the command line appear
    in no log line (DEBUG included) and no file of the output."""
    assert tiny["log"] and SECRET not in tiny["log"]
    for path in tiny["output"].rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes()


def test_the_card_names_the_tokenizer_by_its_origin(tiny, tmp_path, caplog):
    """Issue 25: the embedded tokenizer was published as `tokenizer`; without --license the card said
    `license: other` silently."""
    from jobs.publish import run

    run([str(tiny["output"]), "--repo_id", "someone/books", "--dry_run", str(tmp_path / "dry")])
    card = (tmp_path / "dry" / "README.md").read_text()
    assert "- tokenizer: `bert-base-uncased`" in card and "license: other" in card
    assert "license: other" in caplog.text and "--license" in caplog.text


def test_report_and_inspection_read_only_the_shards_the_manifest_describes(tiny, tmp_path, capsys):
    """Finding 2 for the readers: a shard swapped for another (here the validation shard) is refused
    before its rows are counted or masked."""
    from jobs.report import run as report
    from pipeline.consumers.inspection import read_split_rows
    from pipeline.consumers.outputs import masking_rule

    out = copy_output(tiny, tmp_path / "out")
    (out / m.TRAIN / SHARD0).write_bytes((out / m.VALIDATION / SHARD0).read_bytes())
    with pytest.raises(SystemExit) as exit_code:
        report([str(out), "--html", str(tmp_path / "report.html")])
    assert exit_code.value.code == 1 and SHARD0 in capsys.readouterr().err
    manifest = load_manifest(str(out))
    with pytest.raises(ShardMismatch, match="bytes|sha256"):
        read_split_rows(str(out), m.TRAIN, manifest, masking_rule(manifest), 0, max_rows=10)
    assert read_split_rows(str(out), m.VALIDATION, manifest, masking_rule(manifest), 0).ids.shape[0] > 0


def _swap_the_and_and(out: Path) -> None:
    """The output's tokenizer.json with the ids of `the` and `and` exchanged; the manifest untouched."""
    config = json.loads((out / m.TOKENIZER_FILE).read_text())
    vocab = config["model"]["vocab"]
    vocab["the"], vocab["and"] = vocab["and"], vocab["the"]
    (out / m.TOKENIZER_FILE).write_text(json.dumps(config))


def test_every_consumer_refuses_a_tokenizer_swapped_in_the_output(tiny, tmp_path, capsys):
    """A swapped tokenizer.json passed `validate` (OK), made `inspect_output` decode `and` for `the`, and
    `jobs.train` saved it with the model; only `report` checked it. Each refuses it now, in one line
    naming the file, before anything is decoded, trained or written."""
    from jobs.inspect_output import run as inspect_output
    from jobs.report import run as report
    from jobs.train import run as train
    from jobs.validate import run as validate

    out = copy_output(tiny, tmp_path / "out")
    _swap_the_and_and(out)
    tokenizer = str(out / m.TOKENIZER_FILE)
    assert validate([str(out)]) == 1
    err = capsys.readouterr().err
    assert tokenizer in err and "not the tokenizer the manifest names" in err, err
    for command, args in ((inspect_output, [str(out)]), (report, [str(out), "--html", str(tmp_path / "r.html")])):
        with pytest.raises(SystemExit) as exit_code:
            command(args)
        err = capsys.readouterr().err
        assert exit_code.value.code != 0 and tokenizer in err and "not the tokenizer the manifest names" in err, err
        assert len(err.strip().splitlines()) <= 2, err  # the usage line of a parser error, then the one line
    with pytest.raises(SystemExit, match="not the tokenizer the manifest names"):
        train(["--data", str(out), "--output", str(tmp_path / "model"), "--max_steps", "1"])
    assert not (tmp_path / "model" / m.TOKENIZER_FILE).exists()
    assert not (tmp_path / "r.html").exists()


VOCAB = 30_522  # the tiny output's tokenizer (bert-base-uncased)


def _forge_every_row(out: Path, column: str, value: int, position: int = 2) -> None:
    """Every row of the first train shard holds `value` in `column` at `position`; checksums consistent."""
    def change(table):
        columns = {name: fixed_list_to_numpy(table.column(name), 32).copy() for name in (INPUT_IDS, LABELS)}
        columns[column][:, position] = value
        return pa.table({INPUT_IDS: fixed_list_array(columns[INPUT_IDS]), "attention_mask": table.column("attention_mask"),
                         LABELS: fixed_list_array(columns[LABELS])})

    _rewrite_shard(out, change)


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and " INFO " not in line and " WARNING " not in line]
    assert len(lines) == 1 and "Traceback" not in text, text[-3000:]
    return lines[0]


@pytest.mark.parametrize(("column", "value"), [(INPUT_IDS, 32_000), (LABELS, VOCAB)])
def test_static_ids_or_labels_outside_the_vocabulary_are_one_line_naming_the_shard_and_row(tiny, tmp_path, capsys,
                                                                                          column, value):
    """Issue 36 item 9: a static shard of ids 32,000 (or labels 30,522) in a 30,522-id vocabulary, the
    manifest re-hashed, made jobs.train die deep in torch (`IndexError: index out of range in self`,
    `Target 30522 is out of bounds`); the static read path checked no range."""
    from jobs.inspect_output import run as inspect
    from jobs.report import run as report
    from jobs.train import run as train
    from jobs.validate import run as validate

    out = copy_output(tiny, tmp_path / "out")
    _forge_every_row(out, column, value)
    shard = re.escape(str(out / m.TRAIN / SHARD0))
    named = re.compile(rf"{shard}: row (\d+): {column} holds {value} at position 2, outside the vocabulary "
                       rf"\[0, {VOCAB}\)")
    capsys.readouterr()
    args = ["--data", str(out), "--config", "tiny", "--max_steps", "2", "--batch_size", "4"]
    with pytest.raises(SystemExit) as exit_:
        train([*args, "--output", str(tmp_path / "run")])
    message = str(exit_.value.code)
    assert "\n" not in message and named.search(message), message
    # Raised in a DataLoader worker: one line too, and the process ends (its workers, which ignore
    # SIGTERM, were left waiting for indices and the interpreter's exit waited on them forever).
    done = subprocess.run([sys.executable, "-m", "jobs.train", *args, "--output", str(tmp_path / "workers"),
                           "--num_workers", "1"], capture_output=True, text=True, timeout=300, cwd=REPO)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert last.startswith("jobs.train: ") and named.search(last), done.stderr[-3000:]
    assert validate([str(out)]) == 1
    assert re.search(rf"^INVALID: {shard}: row 0: {column} holds {value}", _one_line(capsys.readouterr().err))
    with pytest.raises(SystemExit) as exit_:
        inspect([str(out)])
    assert exit_.value.code == 1 and named.search(_one_line(capsys.readouterr().err))
    with pytest.raises(SystemExit) as exit_:
        report([str(out), "--html", str(tmp_path / "report.html")])
    assert exit_.value.code == 1 and named.search(_one_line(capsys.readouterr().err))


def _dynamic_with_null_seed(tiny, out: Path) -> None:
    """The tiny output as dynamic output (its original ids, a seed per row) whose first train shard's
    row 5 has a null mask_seed; manifest consistent."""
    copy_output(tiny, out)
    for split in m.SPLITS:
        for shard in sorted((out / split).glob("*.arrow")):
            table = pa.ipc.open_stream(shard.read_bytes()).read_all()
            ids, labels = (fixed_list_to_numpy(table.column(name), 32) for name in (INPUT_IDS, LABELS))
            seeds = [int(i) for i in range(table.num_rows)]
            if split == m.TRAIN and shard.name == SHARD0:
                seeds[5] = None
            dynamic = pa.table({INPUT_IDS: fixed_list_array(np.where(labels != -100, labels, ids).astype(ids.dtype)),
                                "attention_mask": table.column("attention_mask"),
                                "mask_seed": pa.array(seeds, pa.uint64())})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, dynamic.schema) as writer:
                writer.write_table(dynamic)
            shard.write_bytes(sink.getvalue().to_pybytes())
    manifest = read_manifest(out)
    manifest[m.KEY_CONFIG]["masking"] = "dynamic"
    for split in m.SPLITS:
        for entry, shard in zip(manifest[m.KEY_SPLITS][split][m.KEY_SHARDS], sorted((out / split).glob("*.arrow"))):
            describe(entry, shard.read_bytes())
    write_manifest(out, manifest)


def test_a_null_mask_seed_is_one_line_naming_the_shard_and_row(tiny, tmp_path, capsys):
    """Issue 36 item 9: `validate` printed a TypeError traceback (`seeds must be uint64`), and
    inspect_output one of ArrowInvalid."""
    from jobs.inspect_output import run as inspect
    from jobs.validate import run as validate

    out = tmp_path / "out"
    _dynamic_with_null_seed(tiny, out)
    named = f"{out / m.TRAIN / SHARD0}: row 5: mask_seed is null"
    capsys.readouterr()
    assert validate([str(out)]) == 1
    assert _one_line(capsys.readouterr().err) == f"INVALID: {named} (the shard is not one MaskBeam wrote)"
    with pytest.raises(SystemExit) as exit_:
        inspect([str(out)])
    assert exit_.value.code == 1 and named in _one_line(capsys.readouterr().err)
