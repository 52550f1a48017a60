"""The configs an output carries beside its tokenizer.json make `transformers.AutoTokenizer` name every
special token with the manifest's ids, for every tokenizer family (the test tokenizers stand for
tokenizers of the user's own), and `DataCollatorForLanguageModeling` accept the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from pipeline.beam.transforms import tokenizer_record
from pipeline.sample import SAMPLE_TOKENIZER
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerSpec
from pipeline.tokenizer.transformers_files import transformers_files
from schemas import manifest as m
from schemas import options as o

transformers = pytest.importorskip("transformers")

TOKENIZERS = Path(__file__).resolve().parents[1] / "data" / "tokenizers"
FAMILIES = {
    "bert (WordPiece)": SAMPLE_TOKENIZER,
    "roberta (byte-level BPE)": TOKENIZERS / "roberta.json",
    "modernbert (byte-level BPE)": TOKENIZERS / "modernbert.json",
    "gpt2 (byte-level BPE)": TOKENIZERS / "gpt2.json",
    "gpt2_affixes (byte-level BPE)": TOKENIZERS / "gpt2_affixes.json",
    "llama3 (byte-level BPE, Split)": TOKENIZERS / "llama3.json",
    "llama_bpe (byte-fallback BPE)": TOKENIZERS / "llama_bpe",
    "xlmr (Unigram)": TOKENIZERS / "xlmr_unigram",
    "nmt_nfkc (Unigram)": TOKENIZERS / "nmt_nfkc_unigram",
}
TEXT = "It's a [MASK] test, <mask> naïve café 12345 — “quoted” and ünïcode."
ROLES = {"cls_token_id": o.SPECIAL_CLS, "sep_token_id": o.SPECIAL_SEP, "pad_token_id": o.SPECIAL_PAD,
         "mask_token_id": m.KEY_MASK_ID}


def _auto_tokenizer(raw: str, folder: Path, seq_len: int = 64):
    """The output's tokenizer files for `raw` written to `folder`, loaded as a recipient does; with
    the manifest's tokenizer record."""
    spec = TokenizerSpec.from_json(raw)
    record = tokenizer_record(spec, "tok")
    folder.mkdir()
    (folder / m.TOKENIZER_FILE).write_text(spec.json, encoding="utf-8")
    for name, text in transformers_files(spec.json, record, seq_len).items():
        (folder / name).write_text(text, encoding="utf-8")
    return transformers.AutoTokenizer.from_pretrained(str(folder)), spec, record


def _check(auto, spec: TokenizerSpec, record: dict, seq_len: int = 64, text: str = TEXT) -> None:
    for attribute, role in ROLES.items():
        assert getattr(auto, attribute) == record[m.KEY_SPECIAL_IDS][role], attribute
    assert auto.unk_token_id == (spec.unk_id if spec.unk_id >= 0 else None)
    # every id MaskBeam never selects is special to transformers too (so its collator never masks it)
    assert set(auto.all_special_ids) == set(record[m.KEY_NEVER_SELECTED]) | ({spec.unk_id} - {-1})
    assert auto.model_max_length == seq_len
    real = Tokenizer.from_str(spec.json)
    ids = real.encode(text, add_special_tokens=False).ids
    assert auto(text, add_special_tokens=False)["input_ids"] == ids  # the same tokenizer, run as it is
    assert auto.decode(ids) == real.decode(ids, skip_special_tokens=False)
    collator = transformers.DataCollatorForLanguageModeling(auto, mlm_probability=0.5, seed=0)
    row = [spec.cls_id, *ids, spec.sep_id] + [spec.pad_id] * 4
    batch = collator([{"input_ids": row, "attention_mask": [1] * (len(ids) + 2) + [0] * 4}] * 8)
    special = torch.isin(torch.tensor(row), torch.tensor(sorted(set(record[m.KEY_NEVER_SELECTED]))))
    assert (batch["labels"] != -100).any() and (batch["labels"][:, special] == -100).all()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_auto_tokenizer_names_the_manifest_special_ids(family, tmp_path):
    auto, spec, record = _auto_tokenizer(resolve_tokenizer_json(str(FAMILIES[family])), tmp_path / "out")
    _check(auto, spec, record)
    assert type(auto).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")  # no class of the model's


def test_special_tokens_only_in_the_vocabulary_keep_their_ids(tmp_path):
    """A tokenizer of one's own whose [CLS]/[SEP]/[PAD]/[MASK] are ordinary vocabulary entries (no
    added tokens): transformers makes them special tokens without moving them to new ids (and so
    matches "[MASK]" in a text, which the vocabulary-only tokenizer splits: the text has none)."""
    config = json.loads(resolve_tokenizer_json(str(SAMPLE_TOKENIZER)))
    config["added_tokens"] = []
    auto, spec, record = _auto_tokenizer(json.dumps(config), tmp_path / "out", seq_len=128)
    assert spec.mask_id == 103 and len(auto) == spec.vocab_size
    _check(auto, spec, record, seq_len=128, text=TEXT.replace("[MASK] ", ""))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_model_folder_s_tokenizer_names_the_same_special_tokens(family, tmp_path):
    """`jobs.train` saves `hf_tokenizer` with the model: its special tokens are the output's (a Unigram
    model names its unknown piece by id, which a lookup of the model's `unk_token` string missed)."""
    from pipeline.consumers.training.saved_model import hf_tokenizer

    auto, spec, record = _auto_tokenizer(resolve_tokenizer_json(str(FAMILIES[family])), tmp_path / "out")
    hf_tokenizer(spec, 64).save_pretrained(tmp_path / "model")
    saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    _check(saved, spec, record)
    assert saved.special_tokens_map == auto.special_tokens_map
