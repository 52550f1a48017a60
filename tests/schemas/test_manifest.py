"""schemas.manifest.validate_manifest: the one check every consumer runs on a manifest it did not
write. A valid manifest passes unchanged; each crafted one is refused naming its key, and no input
makes it raise anything but ManifestError."""

from __future__ import annotations

import copy
import hashlib
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import manifest as m

SHA = "ab" * 32


def _shard(index: int, count: int, rows: int = 4, size: int = 4096) -> dict:
    counts = {m.SELECTED: 3, m.MASKED: 2, m.RANDOM: 1, m.UNCHANGED: 0}
    return {m.KEY_FILENAME: m.shard_name(index, count), m.KEY_ROWS: rows, m.KEY_BYTES: size, m.KEY_SHA256: SHA,
            m.KEY_MASK_COUNTS: counts, m.KEY_PLAN: SHA}


def valid() -> dict:
    """A manifest as finalize writes it (two train shards, one validation shard)."""
    counts = dict.fromkeys((*m.INPUT_COUNT_NAMES, *m.MASK_COUNT_NAMES), 0)
    counts[m.FILES_SKIPPED_BY_REASON] = {"not text: an HTML/XML page": 1}
    split_counts = {m.SELECTED: 6, m.MASKED: 4, m.RANDOM: 2, m.UNCHANGED: 0}
    return {
        m.KEY_VERSION: 1, m.KEY_PACKAGE_VERSION: "0.1.0", m.KEY_MASK_COUNTS_EPOCH: 0,
        m.KEY_CONFIG: {"inputs": ["books"], "output": "out", "tokenizer": "bert-base-uncased", "hf_dataset": None,
                       "max_seq_length": 32, "masking": "static", "packing": "doc", "masking_unit": "token",
                       "mlm_probability": 0.15, "mask_replace_prob": 0.8, "random_replace_prob": 0.1, "seed": 0,
                       "span_p": 0.2, "max_span": 10, "max_unk_fraction": 0.1, "near_dedup": None, "scripts": [],
                       "dupe_factor": 1},
        m.KEY_TOKENIZER: {"id_dtype": "int16", m.KEY_NAME_OR_PATH: "bert-base-uncased", m.KEY_SHA256: SHA,
                          m.KEY_VOCAB_SIZE: 30522, m.KEY_NEVER_SELECTED: [0, 100, 101, 102, 103],
                          m.KEY_NEVER_REPLACEMENT: [1, 2], m.KEY_CONTINUATION: [1996],
                          m.KEY_SPECIAL_IDS: {"cls": 101, "sep": 102, "pad": 0, "mask": 103}},
        m.KEY_COUNTS: counts,
        m.KEY_SPLITS: {
            m.TRAIN: {m.KEY_ROWS: 8, m.KEY_MASK_COUNTS: split_counts, m.KEY_SHARDS: [_shard(0, 2), _shard(1, 2)]},
            m.VALIDATION: {m.KEY_ROWS: 4, m.KEY_MASK_COUNTS: split_counts, m.KEY_SHARDS: [_shard(0, 1)]},
        },
        m.KEY_INPUTS: [{m.KEY_PATH: "books/a.txt", m.KEY_SIZE: 10, m.TOKENS: 5, m.KEY_ROWS: 1,
                        m.KEY_UNK_FRACTION: 0.0, m.KEY_SCRIPTS: {"Latin": 1.0}}],
        m.KEY_SKIPPED: [{m.KEY_PATH: "books/b.html", m.KEY_REASON: "not text: an HTML/XML page", m.KEY_SIZE: 3}],
        m.KEY_DUPLICATES: [], m.KEY_NEAR_DUPLICATES: [],
    }


def test_a_valid_manifest_passes_unchanged():
    manifest = valid()
    assert m.validate_manifest(manifest) is manifest and manifest == valid()
    assert m.parse_manifest(json.dumps(manifest)) == manifest


def _set(manifest: dict, path: tuple, value) -> dict:
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return manifest


TRAIN0 = (m.KEY_SPLITS, m.TRAIN, m.KEY_SHARDS, 0)


@pytest.mark.parametrize("path, value, named", [
    # shard names: only the writer's template, in its place (finding 2, 12)
    ((*TRAIN0, m.KEY_FILENAME), "../../proc/self/environ", "filename"),
    ((*TRAIN0, m.KEY_FILENAME), "/etc/passwd", "filename"),
    ((*TRAIN0, m.KEY_FILENAME), "s3://other-bucket/data-00000-of-00002.arrow", "filename"),
    ((*TRAIN0, m.KEY_FILENAME), "data-00001-of-00002.arrow", "data-00000-of-00002.arrow"),  # another's slot
    ((*TRAIN0, m.KEY_FILENAME), "x/../data-00000-of-00002.arrow", "filename"),
    ((m.KEY_SPLITS, "../x"), {}, "splits"),
    # numbers that size allocations (finding 7)
    ((m.KEY_TOKENIZER, m.KEY_VOCAB_SIZE), 2_000_000_000, "vocab_size"),
    ((*TRAIN0, m.KEY_ROWS), 5_000_000_000, "rows"),  # more rows than its bytes can hold
    ((*TRAIN0, m.KEY_BYTES), 2**50, "bytes"),
    ((m.KEY_CONFIG, "max_seq_length"), 10**9, "max_seq_length"),
    ((m.KEY_TOKENIZER, m.KEY_SPECIAL_IDS, "mask"), 30522, "mask"),
    ((m.KEY_TOKENIZER, m.KEY_NEVER_SELECTED), [2**40], "never_selected_ids"),
    ((m.KEY_TOKENIZER, "id_dtype"), "int32", "id_dtype"),
    ((m.KEY_SPLITS, m.TRAIN, m.KEY_ROWS), 9, "sum of its shards"),
    # types (finding 3): a string where a number belongs never reaches a page
    ((m.KEY_CONFIG, "seed"), "0 <script>alert(1)</script>", "seed"),
    ((m.KEY_CONFIG, "seed"), True, "seed"),
    ((m.KEY_CONFIG, "masking"), "<b>static</b>", "masking"),
    ((m.KEY_CONFIG, "mlm_probability"), float("nan"), "mlm_probability"),
    ((m.KEY_TOKENIZER, m.KEY_SHA256), "../../victim/planted", "sha256"),
    ((*TRAIN0, m.KEY_SHA256), "A" * 64, "sha256"),
    ((m.KEY_INPUTS, 0, m.KEY_PATH), ["a"], "path"),
    ((m.KEY_SKIPPED, 0, m.KEY_REASON), {"x": 1}, "reason"),
    ((m.KEY_COUNTS, m.ROWS), -1, "rows"),
    ((m.KEY_VERSION,), 99, "manifest_version"),
])
def test_crafted_values_are_refused_naming_the_key(path, value, named):
    with pytest.raises(m.ManifestError, match=named.replace("(", r"\(")):
        m.validate_manifest(_set(valid(), path, value))


def test_a_foreign_manifest_is_refused():
    for text in ('{"name": "my web app"}', "[]", "{not json", '{"a": ' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(m.ManifestError):
            m.parse_manifest(text)
        assert not m.looks_like_own_manifest(text)
    assert m.looks_like_own_manifest(json.dumps(valid()))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


PATHS = [p for p in _paths(valid()) if p]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES | st.just("__delete__")), min_size=1, max_size=3))
def test_any_tampering_is_a_manifest_error_or_still_valid(edits):
    """Whatever is replaced or deleted, the validator answers with ManifestError or accepts a
    manifest whose keys still have the types the consumers use (no KeyError, TypeError...)."""
    manifest = valid()
    for path, value in edits:
        node = manifest
        try:
            for key in path[:-1]:
                node = node[key]
            if value == "__delete__":
                del node[path[-1]]
            else:
                node[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced the parent
    try:
        m.validate_manifest(manifest)
    except m.ManifestError:
        return
    tok, config = manifest[m.KEY_TOKENIZER], manifest[m.KEY_CONFIG]
    assert isinstance(tok[m.KEY_VOCAB_SIZE], int) and 0 < tok[m.KEY_VOCAB_SIZE] <= m.MAX_VOCAB_SIZE
    assert isinstance(config["seed"], int) and isinstance(config["max_seq_length"], int)
    for split in m.SPLITS:
        shards = manifest[m.KEY_SPLITS][split][m.KEY_SHARDS]
        assert [s[m.KEY_FILENAME] for s in shards] == [m.shard_name(i, len(shards)) for i in range(len(shards))]


def valid_v2() -> dict:
    """The same manifest as finalize writes it now: its per-input entries in INPUTS_FILE (`inputs_v2`)."""
    manifest = valid()
    lines = {section: len(manifest.pop(section)) for section in m.INPUT_SECTIONS}
    data = inputs_v2()
    manifest[m.KEY_VERSION] = m.MANIFEST_VERSION
    manifest[m.KEY_INPUTS_FILE] = {m.KEY_FILENAME: m.INPUTS_FILE, m.KEY_BYTES: len(data),
                                   m.KEY_SHA256: hashlib.sha256(data).hexdigest(), m.KEY_LINES: lines}
    return manifest


def inputs_v2() -> bytes:
    manifest = valid()
    return "".join(m.input_line(section, entry) for section in m.INPUT_SECTIONS
                   for entry in manifest[section]).encode("ascii")


def test_both_versions_are_read_and_give_the_same_entries():
    old, new = valid(), valid_v2()
    assert m.validate_manifest(new) is new and m.parse_manifest(m.dumps(new)) == new
    assert list(m.input_entries(new, inputs_v2().splitlines(keepends=True))) == list(m.input_entries(old, None))
    assert m.input_line_counts(new) == m.input_line_counts(old) == {m.KEY_INPUTS: 1, m.KEY_SKIPPED: 1,
                                                                    m.KEY_DUPLICATES: 0, m.KEY_NEAR_DUPLICATES: 0}


@pytest.mark.parametrize("path, value, named", [
    ((m.KEY_INPUTS_FILE, m.KEY_FILENAME), "../../etc/passwd", "inputs_file.filename"),
    ((m.KEY_INPUTS_FILE, m.KEY_SHA256), "x" * 64, "inputs_file.sha256"),
    ((m.KEY_INPUTS_FILE, m.KEY_LINES, m.KEY_SKIPPED), -1, "inputs_file.lines.skipped"),
    ((m.KEY_INPUTS,), [], "inputs: expected no such key"),  # entries in two places: which one is true?
])
def test_crafted_version_2_values_are_refused_naming_the_key(path, value, named):
    with pytest.raises(m.ManifestError, match=named):
        m.validate_manifest(_set(valid_v2(), path, value))


@pytest.mark.parametrize("edit, named", [
    (lambda data: data.replace(b'"tokens":5', b'"tokens":6'), "sha256"),  # an edited line
    (lambda data: data.split(b"\n", 1)[1], "sha256"),  # a line gone
    (lambda data: data + data.split(b"\n", 1)[0] + b"\n", "sha256"),  # a line twice
    (lambda data: data.replace(b'"section":"skipped"', b'"section":"other"'), "line 2: expected an object"),
    (lambda data: data.replace(b'"tokens":5', b'"tokens":"5"'), r"line 1: inputs.tokens: expected an integer"),
    (lambda data: b"{not json\n" + data, "line 1: not valid JSON"),
    (lambda data: b" " * (m.MAX_INPUT_LINE_BYTES + 1) + data, "line 1: over the"),
])
def test_an_inputs_file_other_than_the_one_the_manifest_names_is_refused(edit, named):
    manifest = valid_v2()
    data = edit(inputs_v2())
    with pytest.raises(m.InputsFileError, match=named):
        list(m.input_entries(manifest, m.handle_lines(io.BytesIO(data))))


def test_lines_per_section_must_match_the_manifest():
    manifest = valid_v2()
    manifest[m.KEY_INPUTS_FILE][m.KEY_LINES][m.KEY_DUPLICATES] = 1
    with pytest.raises(m.InputsFileError, match="lines per section"):
        list(m.input_entries(manifest, m.handle_lines(io.BytesIO(inputs_v2()))))


def test_lines_are_read_in_blocks_of_any_size_and_an_endless_line_is_cut():
    """fsspec's files (s3://) take no readline size: lines come from blocks, bounded."""
    data = b"a\nbb\n\nccc"
    for block in (1, 2, 3, 100):
        assert list(m.handle_lines(io.BytesIO(data), block)) == [b"a\n", b"bb\n", b"\n", b"ccc"]
    endless = list(m.handle_lines(io.BytesIO(b"x" * (3 * m.MAX_INPUT_LINE_BYTES))))
    assert len(endless) == 1 and m.MAX_INPUT_LINE_BYTES < len(endless[0]) <= 2 * m.MAX_INPUT_LINE_BYTES + 1
    with pytest.raises(m.InputsFileError, match="line 1: over the"):
        m.parse_input_line(endless[0], 1)
