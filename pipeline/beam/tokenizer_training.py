"""Train a WordPiece (BERT-style) or byte-level BPE tokenizer on the cleaned text the pipeline reads."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.beam.reading.reader import UnitReader
from pipeline.beam.reading.work_units import WorkUnit
from pipeline.tokenizer.encode import iter_paragraphs
from schemas.options import TOKENIZER_KINDS

BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BPE_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
SAVED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")  # what save_tokenizer writes


class TrainingText:
    """The paragraphs of every readable input, cleaned exactly as the preprocess job cleans them; as
    it is read, it counts the inputs read, the characters handed out and each input skipped with its
    reason (the reasons preprocess gives)."""

    def __init__(self, units: list[WorkUnit], text_column: str, keep_boilerplate: bool) -> None:
        self._units, self._text_column, self._keep_boilerplate = units, text_column, keep_boilerplate
        self.read = 0
        self.used = 0
        self.chars = 0
        self.skipped: list[tuple[str, str]] = []  # (path, reason)

    def __iter__(self) -> Iterator[str]:
        for unit in self._units:
            reader = UnitReader(unit, self._text_column, self._keep_boilerplate)
            reason = reader.scan().skip_reason
            self.read += 1
            if reason is not None:
                self.skipped.append((unit.source, reason))
                continue
            self.used += 1
            for _, pieces in reader.documents():
                for piece in pieces:
                    for paragraph in iter_paragraphs(piece):
                        self.chars += len(paragraph)
                        yield paragraph


def _trainable(kind: str, lowercase: bool) -> tuple[Tokenizer, tuple[str, ...]]:
    """An untrained tokenizer of `kind` (its normalizer, pre-tokenizer and decoder) and its special tokens."""
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=None, lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        return tok, BERT_SPECIALS
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.normalizer = normalizers.Lowercase() if lowercase else None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        return tok, BPE_SPECIALS
    raise ValueError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {kind!r}")


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int, lowercase: bool = True,
                    min_frequency: int = 2, show_progress: bool = False) -> Tokenizer:
    """A trained tokenizer with its post-processor set ([CLS] x [SEP] / <s> x </s>). `show_progress`:
    the library's progress bars (for a terminal: elsewhere they are only blank lines)."""
    if vocab_size < 100:
        raise ValueError(f"vocab_size must be >= 100, got {vocab_size}")
    tok, specials = _trainable(kind, lowercase)
    if kind == "wordpiece":
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=list(specials), continuing_subword_prefix="##",
                                            show_progress=show_progress)
    else:
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=list(specials),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=show_progress)
    tok.train_from_iterator(texts, trainer=trainer)
    first, last = (specials[2], specials[3]) if kind == "wordpiece" else (specials[0], specials[2])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}", pair=f"{first} $A {last} $B:1 {last}:1",
        special_tokens=[(first, tok.token_to_id(first)), (last, tok.token_to_id(last))])
    return tok


def save_tokenizer(tok: Tokenizer, kind: str, lowercase: bool, output: str) -> list[str]:
    """tokenizer.json plus the configs `transformers.AutoTokenizer` reads; returns their names (SAVED_FILES)."""
    os.makedirs(output, exist_ok=True)
    tok.save(os.path.join(output, "tokenizer.json"))
    if kind == "wordpiece":
        names = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), BERT_SPECIALS))
        config = {"tokenizer_class": "BertTokenizerFast", "do_lower_case": lowercase, **names}
    else:
        names = dict(zip(("bos_token", "pad_token", "eos_token", "unk_token", "mask_token"), BPE_SPECIALS))
        names.update(cls_token="<s>", sep_token="</s>")
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **names}
    config["model_max_length"] = 512
    with open(os.path.join(output, "tokenizer_config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    with open(os.path.join(output, "special_tokens_map.json"), "w") as handle:
        json.dump(names, handle, indent=2)
    return list(SAVED_FILES)
