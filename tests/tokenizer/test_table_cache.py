"""Probed tables kept on disk between processes give the tables a fresh probe gives."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pipeline.tokenizer.table_cache import CACHE_ENV, cache_root, cached_arrays


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_table_is_built_once_then_loaded_and_a_damaged_file_is_built_again(cache):
    builds = []

    def build():
        builds.append(1)
        return {"a": np.arange(5, dtype=np.int32), "b": np.array([7], dtype=np.uint8)}

    first = cached_arrays("demo", "key 1", ("a", "b"), build)
    again = cached_arrays("demo", "key 1", ("a", "b"), build)
    assert len(builds) == 1 and cache_root() == cache
    for name in ("a", "b"):
        np.testing.assert_array_equal(first[name], again[name])
        assert first[name].dtype == again[name].dtype
    cached_arrays("demo", "key 2", ("a", "b"), build)  # another key: another table
    assert len(builds) == 2
    stored = sorted((cache / "code-points").iterdir(), key=lambda p: p.stat().st_mtime_ns)[0]  # key 1's
    stored.write_bytes(stored.read_bytes()[:40])  # a torn write
    cached_arrays("demo", "key 1", ("a", "b"), build)
    cached_arrays("demo", "key 2", ("a", "b"), build)
    assert len(builds) == 3  # the damaged one was built again, the other loaded


def test_an_unwritable_cache_still_gives_the_table(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "below a file"))
    out = cached_arrays("demo", "k", ("a",), lambda: {"a": np.ones(3)})
    np.testing.assert_array_equal(out["a"], np.ones(3))


@pytest.mark.parametrize("name", ["xlmr_unigram", "nmt_nfkc_unigram", "llama_bpe"])
def test_sentencepiece_tables_from_the_cache_equal_a_fresh_probe(cache, name):
    from pathlib import Path

    from pipeline.tokenizer.resolve import resolve_tokenizer_json
    from pipeline.tokenizer.sentencepiece import fast as sp

    raw = resolve_tokenizer_json(str(Path(__file__).resolve().parent.parent / "data" / "tokenizers" / name))
    per_character = sp._plan(json.loads(raw)).per_character
    fresh = sp._probe_code_points(per_character)
    stored = sp._code_points(per_character)  # builds and stores (or, with no normalizer, probes)
    loaded = sp._code_points(per_character)  # from the file
    for a, b, c in zip(fresh, stored, loaded):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        assert a.dtype == c.dtype
    for path in (cache / "code-points").glob("*"):
        path.unlink()
    sp._TABLES.clear()
    built = sp._tables(raw)  # everything probed
    sp._TABLES.clear()
    reloaded = sp._tables(raw)  # code points and plain forms from the cache
    sp._TABLES.clear()
    for field in dataclasses.fields(built):
        a, b = getattr(built, field.name), getattr(reloaded, field.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype, field.name
        elif not isinstance(a, tuple):
            assert a == b, field.name
