"""Regenerate the SentencePiece-style test tokenizers under tests/data/tokenizers/ (run offline, once).

Needs `sentencepiece` (PyPI) and `transformers`; CI needs neither: it reads the JSON written here.
Each tokenizer is trained with SentencePiece itself on a little of the shared books plus mixed-script
text, converted by transformers' SentencePiece converter, and laid out as the public model's
tokenizer.json is (normalizer, pre-tokenizer, model settings, special tokens):

- xlmr_unigram: XLM-R / DeBERTa-v3 style: Unigram from an `nmt_nfkc` model, a REAL `Precompiled`
  normalizer (SentencePiece's compiled charsmap) then `Replace(" {2,}", " ")`, `Metaspace`
  (prepend_scheme always, split true), fairseq-style specials <s> <pad> </s> <unk> ... <mask>.
- t5_unigram: T5 style: Unigram (<pad> </s> <unk> first), Precompiled + Replace, `Sequence[WhitespaceSplit,
  Metaspace]`, extra ids as special added tokens.
- nmt_nfkc_unigram: a Unigram with byte_fallback whose normalizer is `Sequence[Nmt, NFKC, Replace]`
  (the layout on which tokie disagrees with `tokenizers`), Metaspace always/split.
- llama_bpe: Llama-2 style BPE with byte_fallback: `Sequence[Prepend("▁"), Replace(" ", "▁")]`
  normalizer, no pre-tokenizer, <unk> <s> </s> first, 256 <0xNN> byte pieces.

Usage: python tests/data/tokenizers/make_sentencepiece.py [--books ../shared/corpus/books]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOOKS = ("classics__moby_dick.txt", "classics__war_and_peace.txt", "poetry__iliad.txt", "classics__don_quixote.txt",
         "philosophy__republic.txt", "classics__shen_yin_yu.txt", "classics__ang_filibusterismo.txt",
         "drama__hamlet.txt")
MIXED = [
    "Καλημέρα κόσμε, η γλώσσα μου έδωσαν ελληνική. Ὦ ξεῖν᾽, ἀγγέλλειν Λακεδαιμονίοις",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва — столица России.",
    "日本語の文章です。東京は日本の首都です。漢字とひらがなとカタカナ、全角ＡＢＣ１２３。",
    "中文文本：北京是中国的首都。我们学习汉语，读书写字。",
    "한국어 문장입니다. 서울은 대한민국의 수도입니다. 안녕하세요",
    "مرحبا بالعالم. اللغة العربية جميلة جدا. שלום עולם, עברית היא שפה.",
    "Ça c'est déjà l'été à Zürich: Ångström, naïve façade, crème brûlée, São Paulo, Łódź, İstanbul.",
    "हिन्दी भाषा में यह एक वाक्य है। தமிழ் ஒரு மொழி. ภาษาไทยเป็นภาษา",
    "Emoji 😀🚀 and symbols ½ ¾ ™ © ® ﬁ ﬂ … – — “quotes” ‘single’ №5 ①②③ ㎏ ℃",
    "Tiếng Việt có dấu: Hà Nội, Sài Gòn, người Việt. Čeština: příliš žluťoučký kůň.",
]


def _corpus(books: Path) -> str:
    rng = random.Random(22)
    parts = []
    for name in BOOKS:
        path = books / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            start = len(text) // 3
            parts.append(text[start:start + 150_000])
    for _ in range(60):
        lines = MIXED[:]
        rng.shuffle(lines)
        parts.append("\n".join(lines))
    return "\n".join(parts)


def _train(text: str, character_coverage: float = 0.9995, **options) -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text.splitlines()), model_writer=model, character_coverage=character_coverage,
                                   input_sentence_size=0, num_threads=1,
                                   max_sentence_length=1 << 14, minloglevel=2, **options)
    return model.getvalue()


def _proto(model: bytes):
    os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")  # transformers' old gencode
    from transformers.utils import sentencepiece_model_pb2 as pb2


    proto = pb2.ModelProto()
    proto.ParseFromString(model)
    return proto


def _converted(proto, vocab, merges=None) -> dict:
    """transformers' converter output as a dict (the model and the charsmap come from it)."""
    from transformers.convert_slow_tokenizer import SpmConverter

    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, merges=merges, legacy=True)
    return json.loads(tokenizer.to_str())


def _added(tokens: list[tuple[int, str]]) -> list[dict]:
    return [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": True} for i, t in tokens]


def _precompiled(config: dict) -> dict:
    found = [n for n in config["normalizer"]["normalizers"] if n["type"] == "Precompiled"]
    return found[0]


def _metaspace(scheme: str = "always", split: bool = True) -> dict:
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}


def _write(name: str, config: dict) -> None:
    from tokenizers import Tokenizer

    raw = json.dumps(config, ensure_ascii=False)
    Tokenizer.from_str(raw)  # it loads
    folder = HERE / name
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_text(Tokenizer.from_str(raw).to_str(pretty=False), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=Path, default=HERE.parents[3] / "shared" / "corpus" / "books")
    args = parser.parse_args()
    text = _corpus(args.books)

    # XLM-R / DeBERTa-v3: nmt_nfkc Unigram, fairseq ids (<s> <pad> </s> <unk>), <mask> last.
    proto = _proto(_train(text, model_type="unigram", vocab_size=4000, normalization_rule_name="nmt_nfkc",
                          pad_id=1, bos_id=0, eos_id=2, unk_id=3))
    vocab = [(p.piece, p.score) for p in proto.pieces]
    base = _converted(proto, vocab)
    vocab.append(("<mask>", 0.0))
    base["model"]["vocab"] = [list(v) for v in vocab]
    config = dict(base, added_tokens=_added([(0, "<s>"), (1, "<pad>"), (2, "</s>"), (3, "<unk>"),
                                             (len(vocab) - 1, "<mask>")]),
                  normalizer={"type": "Sequence", "normalizers": [
                      _precompiled(base), {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
                  pre_tokenizer=_metaspace(), decoder=_metaspace())
    _write("xlmr_unigram", config)

    # T5: <pad> </s> <unk>, extra ids as special added tokens, WhitespaceSplit before Metaspace.
    proto = _proto(_train(text, model_type="unigram", vocab_size=3000, normalization_rule_name="nmt_nfkc",
                          pad_id=0, eos_id=1, unk_id=2, bos_id=-1))
    vocab = [(p.piece, p.score) for p in proto.pieces] + [(f"<extra_id_{i}>", 0.0) for i in range(99, -1, -1)]
    base = _converted(proto, vocab)
    extra = [(i, t) for i, (t, _) in enumerate(vocab) if t.startswith("<extra_id_")]
    config = dict(base, added_tokens=_added([(0, "<pad>"), (1, "</s>"), (2, "<unk>"), *extra]),
                  normalizer={"type": "Sequence", "normalizers": [
                      _precompiled(base), {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
                  pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, _metaspace()]},
                  decoder=_metaspace())
    config["model"]["unk_id"] = 2
    _write("t5_unigram", config)

    # Sequence[Nmt, NFKC, Replace]: a Unigram with byte fallback, no charsmap.
    proto = _proto(_train(text, model_type="unigram", vocab_size=4000, normalization_rule_name="identity",
                          byte_fallback=True, character_coverage=0.995, pad_id=1, bos_id=0, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"]))
    vocab = [(p.piece, p.score) for p in proto.pieces]
    base = _converted(proto, vocab)
    config = dict(base, added_tokens=_added([(0, "<s>"), (1, "<pad>"), (2, "</s>"), (3, "<unk>"), (4, "<mask>")]),
                  normalizer={"type": "Sequence", "normalizers": [
                      {"type": "Nmt"}, {"type": "NFKC"},
                      {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]},
                  pre_tokenizer=_metaspace(), decoder=_metaspace())
    config["model"]["byte_fallback"] = True
    _write("nmt_nfkc_unigram", config)

    # Llama-2: BPE with byte fallback, Prepend + Replace normalizer, no pre-tokenizer.
    proto = _proto(_train(text, model_type="bpe", vocab_size=4000, normalization_rule_name="identity",
                          byte_fallback=True, split_digits=True, character_coverage=0.99, add_dummy_prefix=True, remove_extra_whitespaces=False,
                          allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                          user_defined_symbols=["<pad>", "<mask>"]))
    from transformers.tokenization_utils_base import generate_merges

    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    scores = {p.piece: p.score for p in proto.pieces}
    base = _converted(proto, vocab, merges=generate_merges(vocab, scores))  # every piece reachable, as Llama's
    config = dict(base, added_tokens=_added([(0, "<unk>"), (1, "<s>"), (2, "</s>"), (vocab["<pad>"], "<pad>"),
                                             (vocab["<mask>"], "<mask>")]),
                  normalizer={"type": "Sequence", "normalizers": [
                      {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "},
                                                                 "content": "\u2581"}]},
                  pre_tokenizer=None)
    config["model"]["ignore_merges"] = False
    _write("llama_bpe", config)


if __name__ == "__main__":
    main()
