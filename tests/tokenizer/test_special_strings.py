"""No special id ever comes from the text (issue 33), on every test tokenizer and both backends: a
book holding `<s>`, `</s>`, `<pad>`, `<mask>` (pieces of every Unigram vocabulary, which the lattice
picks from the text even with `encode_special_tokens` unless they are emptied) gets those strings as plain text, and the whole
job's output validates."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from tokenizers import Tokenizer

from pipeline.tokenizer.content import SpecialGuard, SpecialIdFromText, content_tokenizer_json, special_ids_of
from pipeline.tokenizer.encode import DocumentEncoder, tokenize_text
from pipeline.tokenizer.fast import FastTokenizer, fast_support
from pipeline.tokenizer.spec import SPECIAL_CANDIDATES, TokenizerError, TokenizerSpec, build_tokenizer
from schemas import manifest as m
from schemas import shard as s
from tests.conftest import TOKENIZER_DIR, run_preprocess
from tests.tokenizer.test_bytelevel import TOKENIZERS, tokenizer_json

NAMES = ("bert", *sorted(p.stem if p.suffix == ".json" else p.name for p in TOKENIZERS.iterdir()
                         if p.suffix == ".json" or (p / "tokenizer.json").is_file()))


def _raw(name: str) -> str:
    return (TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8") if name == "bert" else tokenizer_json(name)


def _path(name: str):
    return TOKENIZER_DIR if name == "bert" else (TOKENIZERS / f"{name}.json" if (TOKENIZERS / f"{name}.json").exists()
                                                 else TOKENIZERS / name)


def _special_text(config: dict) -> str:
    """Every special token's string (and every role spelling) alone, glued to words and doubled."""
    strings = {t["content"] for t in config["added_tokens"] if t["special"]}
    strings |= {spelling for spellings in SPECIAL_CANDIDATES.values() for spelling in spellings}
    return "".join(f"The {x} end. a{x}b {x}{x}\n{x}, ({x}) " for x in sorted(strings)) * 3


def _unk(config: dict, real: Tokenizer) -> int | None:
    model = config["model"]
    return model.get("unk_id") if model["type"] == "Unigram" else real.token_to_id(model.get("unk_token") or "[UNK]")


@pytest.mark.parametrize("name", NAMES)
def test_special_strings_in_the_text_give_no_special_id_on_either_backend(name):
    raw = _raw(name)
    config = json.loads(raw)
    special = special_ids_of(config, SPECIAL_CANDIDATES)
    real = Tokenizer.from_str(content_tokenizer_json(raw, special))  # what build_tokenizer builds
    real.encode_special_tokens = True
    text = _special_text(config)
    content = special - {_unk(config, real)}  # [UNK] from unknown characters is content
    backends = [real] + ([FastTokenizer(real, raw)] if not fast_support(config) else [])
    got = []
    for tokenizer in backends:
        ids = tokenize_text(tokenizer, text)
        assert not set(ids.tolist()) & content, (name, sorted(set(ids.tolist()) & content))
        encoder = DocumentEncoder(tokenizer)
        pieces = [encoder.feed(text[i: i + 37])[0] for i in range(0, len(text), 37)] + [encoder.finish()[0]]
        np.testing.assert_array_equal(np.concatenate(pieces), ids)
        got.append(ids)
    assert all(np.array_equal(got[0], other) for other in got[1:])


def test_the_unigram_lattice_held_the_special_pieces():
    """What the real tokenizer's own encode gives (the difference README documents)."""
    raw = tokenizer_json("xlmr_unigram")
    real = Tokenizer.from_str(raw)
    real.encode_special_tokens = True
    spec = TokenizerSpec.from_json(raw)
    assert spec.mask_id in real.encode("a <mask> b", add_special_tokens=False).ids
    assert spec.mask_id not in build_tokenizer(spec).encode("a <mask> b", add_special_tokens=False).ids


def test_the_guard_names_a_special_id_from_the_text():
    guard = SpecialGuard({0, 5}, unk_id=5, names={0: "<s>"})
    guard.check(np.array([5, 7, 9], dtype=np.int32))
    with pytest.raises(SpecialIdFromText, match="'<s>' \\(id 0\\)"):
        guard.check(np.array([7, 0], dtype=np.int32))


def test_the_guard_finds_the_first_special_id_wherever_the_specials_sit_and_passes_every_other_id():
    """Specials at both ends of a vocabulary (XLM-R's `<mask>` is its last id): every id past the
    largest special, between the specials and the unknown id pass; the first special is named."""
    rng = np.random.default_rng(0)
    specials = {0, 1, 2, 3, 250_001}
    guard = SpecialGuard(specials, unk_id=3, names={0: "<s>", 1: "<pad>", 2: "</s>", 250_001: "<mask>"})
    plain = rng.integers(3, 250_001, 5_000).astype(np.int32)
    guard.check(np.concatenate([plain, np.array([3, 250_000, 250_002, 2**31 - 1], dtype=np.int32)]))
    for special, name in ((0, "<s>"), (2, "</s>"), (250_001, "<mask>")):
        ids = plain.copy()
        ids[1_234], ids[4_000] = special, 1
        with pytest.raises(SpecialIdFromText, match=f"'{name}' \\(id {special}\\)"):
            guard.check(ids)


def _content_specials(out, spec: TokenizerSpec) -> int:
    """Special ids inside rows' content that were not put there by masking (label -100)."""
    found = rows = 0
    for path in sorted(out.rglob("*.arrow")):
        table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        if not table.num_rows:
            continue
        ids = np.stack(table.column(s.INPUT_IDS).to_numpy(zero_copy_only=False))
        labels = np.stack(table.column(s.LABELS).to_numpy(zero_copy_only=False))
        lengths = np.stack(table.column(s.ATTENTION_MASK).to_numpy(zero_copy_only=False)).sum(axis=1)
        positions = np.arange(ids.shape[1])
        content = (positions[None, :] > 0) & (positions[None, :] < lengths[:, None] - 1) & (labels == -100)
        special = np.isin(ids, [i for i in spec.special_ids if i != spec.unk_id])
        found += int((special & content).sum())
        rows += table.num_rows
    assert rows > 0
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_job_on_a_book_of_special_strings_validates(tmp_path, capsys, name):
    try:
        spec = TokenizerSpec.from_json(_raw(name))
    except TokenizerError:
        pytest.skip(f"{name} has no masked-LM special tokens (refused by the job)")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "book.txt").write_text(_special_text(json.loads(spec.json)) * 4, encoding="utf-8")
    out = tmp_path / "out"
    run_preprocess([folder], out, "--max_seq_length", "64", "--min_tokens", "4", "--validation_fraction", "0",
                   "--max_unk_fraction", "0.5",
                   tokenizer=_path(name))
    from jobs.validate import run

    capsys.readouterr()
    code = run([str(out)])
    text = capsys.readouterr().out
    assert code == 0 and text.startswith("OK:"), text
    assert json.loads((out / m.MANIFEST_FILE).read_text())[m.KEY_COUNTS][m.ROWS] > 0
    assert _content_specials(out, spec) == 0
