"""The preprocess job end to end: real runner, real tokenizer, real books."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil

import datasets
import numpy as np
import pytest

from pipeline.consumers.inspection import read_split_rows
from pipeline.consumers.outputs import manifest_with_inputs
from pipeline.kernels.common.hashing import content_digest
from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.sample import SAMPLE_BOOKS
from schemas import manifest as m
from schemas.shard import ATTENTION_MASK, IGNORE_INDEX, INPUT_IDS, LABELS, MASK_SEED
from tests.conftest import (
    HAVE_CORPUS,
    HTML_PAGES,
    TOKENIZER_DIR,
    binomial_tolerance,
    corpus_book,
    run_preprocess,
)

pytestmark = pytest.mark.slow


def _split_arrays(out, split, columns):
    ds = datasets.load_from_disk(str(out))[split].with_format("numpy")
    return {c: np.asarray(ds[c]) for c in columns}


def _file_hashes(out):
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def test_full_corpus_static_loads_and_reports(static_full, spec):
    """The whole corpus (the embedded sample without ../shared: the named skips are the corpus's)."""
    manifest = manifest_with_inputs(str(static_full))
    dd = datasets.load_from_disk(str(static_full))
    assert set(dd) == {m.TRAIN, m.VALIDATION}
    assert dd[m.TRAIN].features[INPUT_IDS].feature.dtype == "int16"
    assert list(dd[m.TRAIN].features) == [INPUT_IDS, ATTENTION_MASK, LABELS]
    counts = manifest[m.KEY_COUNTS]
    skipped = {s[m.KEY_PATH].rsplit("/", 1)[1]: s[m.KEY_REASON] for s in manifest[m.KEY_SKIPPED]}
    if HAVE_CORPUS:
        assert dd[m.TRAIN].num_rows == manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_ROWS] > 10_000
        assert counts[m.FILES_READ] == 49 and counts[m.FILES_SKIPPED] == 4
        assert sorted(skipped) == sorted((*HTML_PAGES, "classics__shen_yin_yu.txt"))
        assert all("HTML" in skipped[name] for name in HTML_PAGES)
        assert skipped["classics__shen_yin_yu.txt"].startswith("[UNK] gate: 57.9% of its")  # the Chinese novel
    else:  # the three sample books: all read, none skipped
        assert dd[m.TRAIN].num_rows == manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_ROWS] > 100
        assert counts[m.FILES_READ] == 3 and counts[m.FILES_SKIPPED] == 0 and not skipped
    assert counts[m.ROWS] == dd[m.TRAIN].num_rows + dd[m.VALIDATION].num_rows
    assert counts[m.SELECTED] == counts[m.MASKED] + counts[m.RANDOM] + counts[m.UNCHANGED]
    n_val = dd[m.VALIDATION].num_rows
    assert abs(n_val / counts[m.ROWS] - 0.01) < binomial_tolerance(0.01, counts[m.ROWS])
    for split, info in manifest[m.KEY_SPLITS].items():
        for shard in info[m.KEY_SHARDS]:
            data = (static_full / split / shard[m.KEY_FILENAME]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == shard[m.KEY_SHA256] and len(data) == shard[m.KEY_BYTES]
    assert not (static_full / m.TEMP_DIR).exists()
    assert manifest[m.KEY_TOKENIZER]["sha256"] == spec.fingerprint
    # the default --tokenizer_backend auto picks the fast backend for BERT's tokenizer (whose bytes equal
    # the hf backend's: test_fast_and_hf_backends_write_the_same_bytes)
    assert manifest[m.KEY_CONFIG]["tokenizer_backend"] == "fast"


def test_every_row_layout_and_static_ratios(static_full, spec, rule):
    arrays = _split_arrays(static_full, m.TRAIN, [INPUT_IDS, ATTENTION_MASK, LABELS])
    ids, attention, labels = arrays[INPUT_IDS], arrays[ATTENTION_MASK], arrays[LABELS]
    original = np.where(labels != IGNORE_INDEX, labels, ids)
    lengths = attention.sum(axis=1)
    rows = np.arange(ids.shape[0])
    assert (original[:, 0] == spec.cls_id).all()
    assert (original[rows, lengths - 1] == spec.sep_id).all()
    positions = np.arange(ids.shape[1])
    assert (attention == (positions[None, :] < lengths[:, None])).all()
    assert (original[positions[None, :] >= lengths[:, None]] == spec.pad_id).all()
    content = (positions[None, :] > 0) & (positions[None, :] < lengths[:, None] - 1)
    assert not np.isin(original[content], [spec.cls_id, spec.sep_id, spec.pad_id]).any()
    # --packing doc: only a document's last row may be short (and then holds at least --min_tokens)
    n_docs = manifest_with_inputs(str(static_full))[m.KEY_COUNTS][m.DOCUMENTS]
    assert (lengths < 512).sum() <= n_docs and lengths.min() >= 64 + 2
    selected = labels != IGNORE_INDEX
    assert not rule.is_special[original[selected]].any()  # specials never selected
    eligible = int((~rule.is_special[original]).sum())
    n_sel = int(selected.sum())
    assert abs(n_sel / eligible - 0.15) < binomial_tolerance(0.15, eligible)
    masked = selected & (ids == spec.mask_id)
    random = selected & ~masked & (ids != labels)
    assert abs(masked.sum() / n_sel - 0.8) < binomial_tolerance(0.8, n_sel)
    assert abs(random.sum() / n_sel - 0.1) < binomial_tolerance(0.1, n_sel) + 1 / rule.replacement_pool.size
    assert not rule.is_special[ids[random]].any()
    assert not np.isin(ids[random], spec.unused_ids).any()
    assert (selected.sum(axis=1) >= 1).all()


def test_rows_reassemble_each_book_exactly(dynamic_full, spec, bert_fast):
    """No row spans two books, nothing is lost but the counted short tail, and ids equal
    BertTokenizerFast's on the cleaned text."""
    manifest = manifest_with_inputs(str(dynamic_full))
    arrays = _split_arrays(dynamic_full, m.TRAIN, [INPUT_IDS, ATTENTION_MASK, MASK_SEED])
    ids, lengths = arrays[INPUT_IDS], arrays[ATTENTION_MASK].sum(axis=1)
    inputs = sorted(manifest[m.KEY_INPUTS], key=lambda e: (e["content_sha256"], e[m.KEY_PATH]))
    texts = [clean_bytes(open(entry[m.KEY_PATH], "rb").read()).text for entry in inputs]
    every_expected = bert_fast(texts, add_special_tokens=False)["input_ids"]  # one batch: all cores
    start = 0
    for entry, text, expected in zip(inputs, texts, every_expected):
        assert content_digest(text) == entry["content_sha256"]
        expected = np.array(expected)
        n = entry[m.KEY_ROWS]
        got = np.concatenate([ids[r, 1 : lengths[r] - 1] for r in range(start, start + n)])
        kept = len(got)
        np.testing.assert_array_equal(got, expected[:kept], err_msg=entry[m.KEY_PATH])
        assert len(expected) - kept < 64  # only a short tail under --min_tokens is dropped
        start += n
    assert start == ids.shape[0]
    assert manifest[m.KEY_COUNTS][m.TOKENS] == sum(e[m.TOKENS] for e in inputs)


def test_inspect_prints_the_check_line(static_full, dynamic_full, capsys):
    from jobs.inspect_output import run

    def check_line(lines):
        """The four ratios within 5 standard deviations (plus the rounding to 2 decimals) of the config,
        for the counts the line before states; then True."""
        selected, eligible = map(int, re.search(r"selected=(\d+) of (\d+) eligible", lines[-3]).groups())
        got = [float(x) for x in lines[-2].split()]
        for value, want, n in zip(got, (0.15, 0.8, 0.1, 0.1), (eligible, selected, selected, selected)):
            assert abs(value - want) <= binomial_tolerance(want, n) + 0.005, (lines[-2], want, n)
        assert lines[-1] == "True"

    run([str(static_full)])
    lines = capsys.readouterr().out.strip().splitlines()
    check_line(lines)
    assert any("[MASK]<" in line for line in lines)
    run([str(dynamic_full), "--epoch", "3"])
    check_line(capsys.readouterr().out.strip().splitlines())


def test_static_copy_k_equals_dynamic_epoch_k(small_books, tmp_path, spec, rule):
    static_out, dynamic_out = tmp_path / "static", tmp_path / "dynamic"
    run_preprocess([small_books], static_out, "--dupe_factor", "3", "--seed", "11", "--num_shards", "2")
    run_preprocess([small_books], dynamic_out, "--masking", "dynamic", "--seed", "11")
    static = _split_arrays(static_out, m.TRAIN, [INPUT_IDS, LABELS])
    manifest = manifest_with_inputs(str(dynamic_out))
    n = manifest[m.KEY_SPLITS][m.TRAIN][m.KEY_ROWS]
    assert static[INPUT_IDS].shape[0] == 3 * n
    for epoch in range(3):
        rows = read_split_rows(str(dynamic_out), m.TRAIN, manifest, rule, epoch)
        np.testing.assert_array_equal(static[INPUT_IDS][epoch * n : (epoch + 1) * n], rows.ids)
        np.testing.assert_array_equal(static[LABELS][epoch * n : (epoch + 1) * n], rows.labels)
    copies = static[LABELS].reshape(3, n, -1)
    assert (copies[0] != copies[1]).any(axis=1).all()


def test_byte_identical_across_workers_modes_and_input_order(small_books, tmp_path):
    names = sorted(p.name for p in small_books.iterdir())
    files = [small_books / name for name in names]
    common = ["--num_shards", "3", "--validation_fraction", "0.2"]
    reference = tmp_path / "one_worker"
    run_preprocess(files, reference, *common, "--direct_num_workers", "1")
    expected = _file_hashes(reference)
    assert len([k for k in expected if k.endswith(".arrow")]) == 6
    runs = {
        "two_workers_shuffled": (files[::-1], ["--direct_num_workers", "2"]),
        "threads_glob": ([small_books / "*.txt"], ["--direct_num_workers", "2", "--direct_running_mode",
                                                  "multi_threading"]),
    }
    for name, (inputs, extra) in runs.items():
        out = tmp_path / name
        run_preprocess(inputs, out, *common, *extra)
        got = _file_hashes(out)
        manifest_a = json.loads((reference / m.MANIFEST_FILE).read_text())
        manifest_b = json.loads((out / m.MANIFEST_FILE).read_text())
        assert manifest_a[m.KEY_COUNTS] == manifest_b[m.KEY_COUNTS]
        assert {k: v for k, v in got.items() if k != m.MANIFEST_FILE} == \
            {k: v for k, v in expected.items() if k != m.MANIFEST_FILE}, name
        manifest_b[m.KEY_CONFIG]["output"] = manifest_a[m.KEY_CONFIG]["output"]
        manifest_b[m.KEY_CONFIG]["inputs"] = manifest_a[m.KEY_CONFIG]["inputs"]
        assert manifest_a == manifest_b


def test_truncating_tokenizer_json_does_not_truncate(tmp_path):
    config = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    config["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
    tok = tmp_path / "truncating.json"
    tok.write_text(json.dumps(config))
    out = tmp_path / "out"
    run_preprocess([corpus_book("classics__yellow_wallpaper.txt")], out, "--masking", "dynamic", tokenizer=tok)
    arrays = _split_arrays(out, m.TRAIN, [ATTENTION_MASK])
    assert (arrays[ATTENTION_MASK].sum(axis=1) == 512).sum() >= 10


def test_bad_files_are_counted_not_fatal(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(corpus_book("classics__yellow_wallpaper.txt"), inputs / "book.txt")
    (inputs / "empty.txt").write_bytes(b"")
    (inputs / "latin1.txt").write_bytes(("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e. " * 400).encode("latin-1"))
    (inputs / "binary.txt").write_bytes(bytes(range(256)) * 50)
    (inputs / "nested").mkdir()
    with gzip.open(inputs / "nested" / "book.txt.gz", "wb") as handle:
        handle.write((corpus_book("drama__doctor_faustus.txt")).read_bytes())
    out = tmp_path / "out"
    run_preprocess([inputs], out)
    manifest = manifest_with_inputs(str(out))
    skipped = {s[m.KEY_PATH].rsplit("/", 1)[1]: s[m.KEY_REASON] for s in manifest[m.KEY_SKIPPED]}
    assert set(skipped) == {"empty.txt", "binary.txt"}
    assert skipped["empty.txt"].startswith("empty") and "binary" in skipped["binary.txt"]
    counts = manifest[m.KEY_COUNTS]
    assert counts[m.FILES_READ] == 5 and counts[m.DOCUMENTS] == 3
    assert counts[m.REPLACED_BYTES] == 400 * 4  # é, è, û, é are one invalid byte each in Latin-1
    paths = {e[m.KEY_PATH].rsplit("/", 1)[1] for e in manifest[m.KEY_INPUTS]}
    assert paths == {"book.txt", "latin1.txt", "book.txt.gz"}


def test_jsonl_documents_with_concat_packing(tmp_path):
    docs = [{"text": f"Document number {i}. " + "The quick brown fox jumps over the lazy dog. " * (i % 7 + 1)}
            for i in range(300)]
    lines = [json.dumps(d) for d in docs] + ["not json", json.dumps({"other": 1})]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines))
    out = tmp_path / "out"
    run_preprocess([path], out, "--packing", "concat", "--masking", "dynamic", "--validation_fraction", "0",
                   "--max_seq_length", "128")
    manifest = manifest_with_inputs(str(out))
    counts = manifest[m.KEY_COUNTS]
    assert counts[m.DOCUMENTS] == 300 and counts[m.RECORDS_SKIPPED] == 2
    ids = _split_arrays(out, m.TRAIN, [INPUT_IDS])[INPUT_IDS]
    assert ids.shape[1] == 128 and (ids[:-1, -1] == 102).all()
    assert ((ids == 102).sum(axis=1) > 2).mean() > 0.5  # short documents share rows, [SEP] between


def test_validation_by_document_keeps_each_document_in_one_split(tmp_path, spec):
    """40 documents, each one word repeated (so a row names its document by its first token), 3 rows
    each: by row some document has rows in both splits; by document none does."""
    vocab = json.loads(spec.json)["model"]["vocab"]
    words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) > 3)[:40]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps({"text": " ".join([w] * 300)}) for w in words))
    splits_of = {}
    for unit in ("row", "document"):
        out = tmp_path / unit
        run_preprocess([path], out, "--validation_unit", unit, "--validation_fraction", "0.3",
                       "--max_seq_length", "128", "--masking", "dynamic")
        assert manifest_with_inputs(str(out))[m.KEY_CONFIG]["validation_unit"] == unit
        seen: dict[int, set] = {}
        for split in m.SPLITS:
            for first in _split_arrays(out, split, [INPUT_IDS])[INPUT_IDS][:, 1]:
                seen.setdefault(int(first), set()).add(split)
        assert len(seen) == 40
        splits_of[unit] = seen
    assert any(len(s) == 2 for s in splits_of["row"].values())
    assert all(len(s) == 1 for s in splits_of["document"].values())
    held_out = sum(s == {m.VALIDATION} for s in splits_of["document"].values())
    assert 0 < held_out < 40  # about 0.3 of the documents (binomial, 40 draws)


def test_existing_output_is_refused_without_overwrite(tmp_path):
    out = tmp_path / "out"
    book = corpus_book("classics__yellow_wallpaper.txt")
    run_preprocess([book], out)
    with pytest.raises(SystemExit) as error:
        run_preprocess([book], out)
    assert error.value.code == 2
    run_preprocess([book], out, "--overwrite", "--masking", "dynamic")
    assert manifest_with_inputs(str(out))[m.KEY_CONFIG]["masking"] == "dynamic"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(SystemExit):
        run_preprocess([book], foreign, "--overwrite")
    assert (foreign / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--input", "/nonexistent/books/*.txt"], "matches no file"),
        (["--tokenizer", "/nonexistent/tokenizer.json"], "does not exist"),
        (["--max_seq_length", "7"], "max_seq_length"),
        (["--mlm_probability", "1.5"], "mlm_probability"),
        (["--mask_replace_prob", "-0.1"], "mask_replace_prob"),
        (["--mask_replace_prob", "0.9", "--random_replace_prob", "0.2"], "must be <= 1"),
        (["--validation_fraction", "1"], "validation_fraction"),
        (["--dupe_factor", "0"], "dupe_factor"),
        (["--sed=3"], "unrecognized arguments: --sed=3"),
    ],
)
def test_bad_options_fail_cleanly_before_writing(tmp_path, capsys, extra, message):
    from jobs.preprocess import run

    out = tmp_path / "out"
    argv = ["--input", str(corpus_book("classics__yellow_wallpaper.txt")), "--output", str(out),
            "--tokenizer", str(TOKENIZER_DIR)]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    if len(extra) % 2:
        argv += extra[-1:]
    with pytest.raises(SystemExit) as error:
        run(argv)
    assert error.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_local_datasets_folder_and_parquet_inputs(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"Row {i}: " + "words in a sentence. " * (50 + i) for i in range(20)]
    folder = tmp_path / "hf"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(folder))
    pq.write_table(pa.table({"body": texts}), tmp_path / "rows.parquet")
    from_hf, from_parquet = tmp_path / "out_hf", tmp_path / "out_pq"
    run_preprocess([], from_hf, "--hf_dataset", str(folder), "--masking", "dynamic")
    run_preprocess([tmp_path / "rows.parquet"], from_parquet, "--text_column", "body", "--masking", "dynamic")
    for out in (from_hf, from_parquet):
        counts = manifest_with_inputs(str(out))[m.KEY_COUNTS]
        assert counts[m.DOCUMENTS] == 20 and counts[m.ROWS] == 20
    for split in m.SPLITS:
        a = (from_hf / split / "data-00000-of-00001.arrow").read_bytes()
        assert a == (from_parquet / split / "data-00000-of-00001.arrow").read_bytes()
    fingerprint = json.loads((folder / "state.json").read_text())["_fingerprint"]  # what save_to_disk recorded
    assert manifest_with_inputs(str(from_hf))[m.KEY_CONFIG]["hf_revision"] == f"fingerprint:{fingerprint}"
    assert run_preprocess([], from_hf, "--hf_dataset", str(folder), "--masking", "dynamic", "--resume") is None
    datasets.Dataset.from_dict({"text": texts[::-1]}).save_to_disk(str(tmp_path / "hf2"))
    shutil.rmtree(folder)
    shutil.move(tmp_path / "hf2", folder)  # the same folder now holds another dataset
    with pytest.raises(SystemExit):
        run_preprocess([], from_hf, "--hf_dataset", str(folder), "--masking", "dynamic", "--resume")
    assert "--hf_revision: was 'fingerprint:" in capsys.readouterr().err


def test_large_jsonl_is_read_in_byte_ranges(tmp_path):
    """A large .jsonl is cut into byte ranges (units any worker can take); every record is read
    exactly once and the rows equal those of the unsplit file."""
    import random

    rng = random.Random(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "while", "seven", "wizards", "quietly", "hum"]
    records = [{"text": f"Record {i}. " + " ".join(rng.choice(words) for _ in range(rng.randint(60, 300)))}
               for i in range(1200)]
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert 1_200_000 < path.stat().st_size < 1_400_000
    split, whole = tmp_path / "split", tmp_path / "whole"
    run_preprocess([path], split, "--masking", "dynamic", "--split_bytes", "200000", "--validation_fraction", "0")
    run_preprocess([path], whole, "--masking", "dynamic", "--validation_fraction", "0")
    ranges = manifest_with_inputs(str(split))[m.KEY_INPUTS]
    assert len(ranges) == 7 and all("@" in e[m.KEY_PATH] for e in ranges)
    counts = manifest_with_inputs(str(split))[m.KEY_COUNTS]
    assert counts[m.DOCUMENTS] == 1200
    assert counts[m.FILES_READ] == 1 and counts[m.FILES_SKIPPED] == 0  # ranges are not files
    a = _split_arrays(split, m.TRAIN, [INPUT_IDS, MASK_SEED])
    b = _split_arrays(whole, m.TRAIN, [INPUT_IDS, MASK_SEED])
    order_a, order_b = np.argsort(a[MASK_SEED]), np.argsort(b[MASK_SEED])
    np.testing.assert_array_equal(a[MASK_SEED][order_a], b[MASK_SEED][order_b])
    np.testing.assert_array_equal(a[INPUT_IDS][order_a], b[INPUT_IDS][order_b])


def test_tiny_byte_ranges_count_one_file_and_skip_none(tmp_path):
    """A 30 KB jsonl of 2-3 KB records in 1 KB ranges: most ranges hold no record start; the file is
    still one file read, nothing is skipped and no range is a duplicate of another."""
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"Record {i}: " + "a sentence of words " * (100 + i % 50)})
                              for i in range(12)) + "\n")
    assert 25_000 < path.stat().st_size < 40_000
    out = tmp_path / "out"
    run_preprocess([path], out, "--split_bytes", "1024", "--max_seq_length", "128", "--min_tokens", "1")
    manifest = manifest_with_inputs(str(out))
    counts = manifest[m.KEY_COUNTS]
    assert counts[m.FILES_READ] == 1 and counts[m.FILES_SKIPPED] == 0 and manifest[m.KEY_SKIPPED] == []
    assert counts[m.DOCUMENTS] == 12
    assert manifest[m.KEY_DUPLICATES] == []  # ranges without a record are not duplicates of each other


def test_large_text_file_is_tokenized_in_byte_ranges_with_the_rows_of_the_whole(tmp_path, caplog):
    """Three books in one file (three Gutenberg bodies) in ~16 ranges tokenized by many workers,
    packed by sentences (rows end at sentence ends, some rows shorter: the hardest case to stitch):
    the shards are byte-identical to the unsplit run; a compressed input over --split_bytes is
    streamed by one worker, and the log says so. (`--packing doc` split on a Dask cluster and on S3:
    tests/jobs/test_cluster.py, tests/jobs/test_object_store.py.)"""
    packing = "sentences"
    import gzip
    import logging

    caplog.set_level(logging.INFO, logger="maskbeam")
    books = sorted(SAMPLE_BOOKS.glob("*.txt"))  # 0.34 MB: the ranges' count, not the books' size, is the case
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "three_books.txt").write_bytes(b"\n".join(p.read_bytes() for p in books))
    (inputs / "book.txt.gz").write_bytes(gzip.compress(books[2].read_bytes()))
    # UTF-16 cannot be cut at byte ranges: marked for splitting by size, then tokenized whole
    (inputs / "utf16.txt").write_bytes(b"\xff\xfe" + books[1].read_text(encoding="utf-8", errors="replace")
                                       .encode("utf-16-le"))
    # about 16 ranges of the package's three sample books
    range_bytes = (inputs / "three_books.txt").stat().st_size // 16 // 1024 * 1024
    assert (inputs / "book.txt.gz").stat().st_size > range_bytes >= 16 * 1024
    manifests = {}
    for name, split_bytes in (("split", str(range_bytes)), ("whole", str(1 << 30))):
        run_preprocess([inputs], tmp_path / name, "--split_bytes", split_bytes, "--packing", packing)
        manifests[name] = manifest_with_inputs(str(tmp_path / name))
    log = caplog.text
    assert "2 large text input(s) are tokenized by many workers in byte ranges" in log
    assert "1 compressed input(s) over --split_bytes" in log and "book.txt.gz" in log
    split, whole = manifests["split"], manifests["whole"]
    assert split[m.KEY_COUNTS] == whole[m.KEY_COUNTS] and split[m.KEY_INPUTS] == whole[m.KEY_INPUTS]
    assert split[m.KEY_COUNTS][m.FILES_READ] == 3 and split[m.KEY_COUNTS][m.DOCUMENTS] == 3
    for name in m.SPLITS:
        shards = [s["sha256"] for s in split[m.KEY_SPLITS][name]["shards"]]
        assert shards == [s["sha256"] for s in whole[m.KEY_SPLITS][name]["shards"]]
    assert not list((tmp_path / "split").rglob("*.ids"))  # the range files are gone


def test_fast_and_hf_backends_write_the_same_bytes(small_books, tmp_path):
    """The fast tokenizer changes nothing but the recorded backend, on real books plus a file of every
    Unicode trap (tests/tokenizer/test_fast.py); it runs in worker processes as well as on the one
    in-process worker of a small job (the hf run here). (The
    default, auto, picks it for BERT: test_full_corpus_static_loads_and_reports.)"""
    from tests.tokenizer.test_fast import HOSTILE

    inputs = tmp_path / "in"
    shutil.copytree(small_books, inputs)
    (inputs / "hostile.txt").write_text(HOSTILE.replace("\x00", "") * 40, encoding="utf-8")  # NUL: binary
    outputs = {}
    for backend, extra in (("fast", ["--direct_running_mode", "multi_processing"]), ("hf", [])):
        outputs[backend] = tmp_path / backend
        run_preprocess([inputs], outputs[backend], "--tokenizer_backend", backend, "--num_shards", "2", *extra)
    manifests = {name: manifest_with_inputs(str(out)) for name, out in outputs.items()}
    assert manifests["fast"][m.KEY_CONFIG]["tokenizer_backend"] == "fast"
    assert manifests["hf"][m.KEY_CONFIG]["tokenizer_backend"] == "hf"
    hashes = {name: {k: v for k, v in _file_hashes(out).items() if k != m.MANIFEST_FILE}
              for name, out in outputs.items()}
    assert hashes["fast"] == hashes["hf"]
    for manifest in manifests.values():
        manifest[m.KEY_CONFIG].pop("tokenizer_backend")
        manifest[m.KEY_CONFIG]["output"] = ""
    assert manifests["fast"] == manifests["hf"]
    assert not any(s[m.KEY_PATH].endswith("hostile.txt") for s in manifests["hf"][m.KEY_SKIPPED])
    assert manifests["hf"][m.KEY_COUNTS][m.UNK_TOKENS] > 0  # the traps reached the tokenizers


def test_fast_backend_on_an_unsupported_tokenizer_is_refused_and_auto_falls_back(tmp_path, capsys):
    config = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    config["pre_tokenizer"] = {"type": "Whitespace"}
    tok = tmp_path / "whitespace.json"
    tok.write_text(json.dumps(config))
    book = SAMPLE_BOOKS / "classics__yellow_wallpaper.txt"  # one short book: what is checked is the backend
    with pytest.raises(SystemExit) as exit_info:
        run_preprocess([book], tmp_path / "refused", "--tokenizer_backend", "fast", tokenizer=tok)
    assert exit_info.value.code == 2
    assert "pre-tokenizer Whitespace" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    run_preprocess([book], tmp_path / "auto", tokenizer=tok)
    assert json.loads((tmp_path / "auto" / m.MANIFEST_FILE).read_text())[m.KEY_CONFIG]["tokenizer_backend"] == "hf"
