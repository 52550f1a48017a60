"""The launcher's checked tokenizer spec, kept on disk by the sha256 of the file's bytes and of the
code (resolve.resolve_spec): read back equal to the one built, another key for a changed file, a
refused file never kept, a torn entry built again."""

from __future__ import annotations

import json

import pytest

from pipeline.tokenizer import resolve
from pipeline.tokenizer.errors import TokenizerError
from pipeline.tokenizer.spec import TokenizerSpec
from pipeline.tokenizer.table_cache import CACHE_ENV
from tests.conftest import TOKENIZER_DIR
from tests.tokenizer.test_bytelevel import TOKENIZERS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def builds(monkeypatch):
    """How many times the spec was checked and built (not read back)."""
    made = []
    real = resolve._resolved

    def counted(name_or_path, raw):
        made.append(name_or_path)
        return real(name_or_path, raw)

    monkeypatch.setattr(resolve, "_resolved", counted)
    return made


def _built(path) -> TokenizerSpec:
    return TokenizerSpec.from_json(resolve.resolve_tokenizer_json(str(path)))


@pytest.mark.parametrize("path", [TOKENIZER_DIR, TOKENIZERS / "xlmr_unigram", TOKENIZERS / "roberta.json"],
                         ids=["bert", "xlmr_unigram", "roberta"])
def test_a_kept_spec_equals_the_one_built(path, cache, builds):
    want = _built(path)
    first = resolve.resolve_spec(str(path))
    second = resolve.resolve_spec(str(path))
    assert len(builds) == 2  # _built's own, and the first resolve_spec's; the second is read back
    for got in (first, second):
        assert got == want
        assert got.fingerprint == want.fingerprint
        assert got.layout(128, 8) == want.layout(128, 8)
    assert list((cache / "code-points").glob("tokenizer-spec-*.npz"))


def test_a_changed_file_is_another_key(tmp_path, cache, builds):
    path = tmp_path / "tokenizer.json"
    config = json.loads((TOKENIZERS / "roberta.json").read_text(encoding="utf-8"))
    path.write_text(json.dumps(config), encoding="utf-8")
    before = resolve.resolve_spec(str(path))
    config["pre_tokenizer"]["add_prefix_space"] = True  # same path and size class, one flag otherwise
    path.write_text(json.dumps(config), encoding="utf-8")
    after = resolve.resolve_spec(str(path))
    assert len(builds) == 2
    assert after.fingerprint != before.fingerprint
    assert json.loads(after.json)["pre_tokenizer"]["add_prefix_space"] is True and after == _built(path)


def test_a_refused_file_is_never_kept_and_a_torn_entry_is_built_again(tmp_path, cache, builds):
    path = tmp_path / "tokenizer.json"
    config = json.loads((TOKENIZERS / "roberta.json").read_text(encoding="utf-8"))
    config["added_tokens"] = [t for t in config["added_tokens"] if t["content"] != "<mask>"]
    config["model"]["vocab"].pop("<mask>")
    path.write_text(json.dumps(config), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(TokenizerError, match="mask"):
            resolve.resolve_spec(str(path))
    assert len(builds) == 2 and not list(cache.rglob("*.npz"))
    good = TOKENIZERS / "roberta.json"
    want = resolve.resolve_spec(str(good))
    (entry,) = cache.rglob("tokenizer-spec-*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # torn
    assert resolve.resolve_spec(str(good)) == want
    assert len(builds) == 4
