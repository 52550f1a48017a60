import json

import numpy as np
import pytest

from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.tokenizer.encode import MAX_PIECE_CHARS, iter_paragraphs, tokenize_text
from pipeline.tokenizer.resolve import resolve_tokenizer_json
from pipeline.tokenizer.spec import TokenizerError, TokenizerSpec, build_tokenizer
from tests.conftest import TOKENIZER_DIR, book_cases

PARITY_BOOKS = ("classics__great_gatsby.txt", "poetry__beowulf.txt", "classics__shen_yin_yu.txt",
                "classics__ang_filibusterismo.txt", "drama__hamlet.txt")


@pytest.mark.parametrize("book", book_cases(*PARITY_BOOKS))
def test_ids_equal_bert_tokenizer_fast(spec, bert_fast, book):
    text = clean_bytes(book.path.read_bytes()).text
    ours = tokenize_text(build_tokenizer(spec), text)
    theirs = bert_fast(text, add_special_tokens=False)["input_ids"]
    assert len(ours) > (10_000 if book.whole else 2_000)
    np.testing.assert_array_equal(ours, theirs)


def test_special_ids_come_from_the_tokenizer(spec):
    assert (spec.cls_id, spec.sep_id, spec.pad_id, spec.mask_id, spec.vocab_size) == (101, 102, 0, 103, 30522)
    assert set(spec.special_ids) == {0, 100, 101, 102, 103}
    assert len(spec.unused_ids) == 994 and min(spec.unused_ids) == 1 and max(spec.unused_ids) == 998


def test_replacement_pool_is_ordinary_vocabulary(spec, rule):
    pool = set(rule.replacement_pool.tolist())
    assert len(pool) == spec.vocab_size - 994 - 5
    assert not pool & set(spec.special_ids) and not pool & set(spec.unused_ids)
    assert min(pool) == 999


def test_truncation_and_padding_in_the_file_are_switched_off(tmp_path, spec):
    config = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    config["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
    config["padding"] = {"strategy": {"Fixed": 200}, "direction": "Right", "pad_to_multiple_of": None,
                         "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    truncating = TokenizerSpec.from_json(resolve_tokenizer_json(str(path)))
    assert truncating.fingerprint == spec.fingerprint
    text = "word " * 5000
    assert len(tokenize_text(build_tokenizer(truncating), text)) == 5000


def test_special_strings_in_text_are_plain_text(spec):
    ids = tokenize_text(build_tokenizer(spec), "a [SEP] b [MASK] c [CLS]")
    assert not np.isin(ids, spec.special_ids).any()


def test_long_paragraphs_are_split_without_changing_ids(spec, bert_fast):
    text = ("lorem ipsum dolor sit amet " * (3 * MAX_PIECE_CHARS // 27)).strip()
    pieces = list(iter_paragraphs(text))
    assert len(pieces) >= 3 and max(map(len, pieces)) <= MAX_PIECE_CHARS
    np.testing.assert_array_equal(tokenize_text(build_tokenizer(spec), text),
                                  bert_fast(text, add_special_tokens=False)["input_ids"])


def test_bad_tokenizers_fail_with_clear_errors(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        resolve_tokenizer_json(str(tmp_path / "missing" / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="has no tokenizer.json"):
        resolve_tokenizer_json(str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="not a valid tokenizer.json"):
        resolve_tokenizer_json(str(bad))


def test_vocab_size_is_the_largest_id_plus_one_when_ids_have_gaps():
    """A vocabulary with a gap in its ids: tables indexed by id need max id + 1 slots, not the count."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 40}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    spec = TokenizerSpec.from_json(tok.to_str())
    assert spec.vocab_size == 41
    rule = spec.masking_rule(0.5, 0.8, 0.1)
    ids = np.array([[2, 40, 5, 40, 40, 5, 40, 3]], dtype=np.int16)
    from pipeline.kernels.rows.masking import mask_rows

    mask_rows(ids, np.array([7], dtype=np.uint64), 0, rule)  # an IndexError before the fix
