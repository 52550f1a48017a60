"""Make the small byte-level BPE test tokenizers shipped next to this script (run it from the repo root:
`python tests/data/tokenizers/make_tokenizers.py`). Each is trained by `tokenizers` itself on the first
60 kB of eight shared books (or the embedded sample books) plus mixed-script text, and configured as
the public model it stands for:

- roberta.json: roberta-base (ByteLevel without prefix space, RobertaProcessing, <s> </s> <mask>);
- modernbert.json: ModernBERT (ByteLevel BPE with BERT-style specials and a template processor);
- gpt2.json: GPT-2 style, here with add_prefix_space on (and <|endoftext|>);
- gpt2_affixes.json: the same with a continuing_subword_prefix and an end_of_word_suffix;
- llama3.json: Llama-3 / OLMo-2 style (Split of the cl100k regex + regex-less ByteLevel, ignore_merges).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from pipeline.kernels.tokenizer.bytelevel.encode import LLAMA3_PATTERN  # noqa: E402

MIXED = (
    "Ça va? Où est la gare? Straße, Grüße, Æsir. Ελληνικά κείμενα, Русский текст, ქართული, "
    "日本語の文章です。中文文本。한국어 텍스트 입니다. עברית, العربية, हिन्दी पाठ, ภาษาไทย. "
    "Emoji 😀🚀 and ﬁ ligatures, ｆｕｌｌｗｉｄｔｈ, ½ ¼, 1,234.56 3.14159 2024-01-01 we'll they've I'M she's DON'T "
)
BOOKS = ("classics__yellow_wallpaper.txt", "drama__importance_of_being_earnest.txt", "drama__doctor_faustus.txt",
         "specialized_texts__ponies_past_and_present.txt", "classics__humphry_clinker.txt",
         "philosophy__tractatus.txt", "poetry__spoon_river_anthology.txt", "classics__pride_and_prejudice.txt")


def training_text() -> list[str]:
    shared = Path(os.environ.get("MASKBEAM_SHARED", REPO.parent / "shared")) / "corpus" / "books"
    paths = [shared / name for name in BOOKS if (shared / name).is_file()]
    if not paths:
        from pipeline.sample import SAMPLE_BOOKS
        paths = sorted(SAMPLE_BOOKS.glob("*.txt"))
    texts = [path.read_text(encoding="utf-8", errors="replace")[:60_000] for path in paths]
    return texts + [MIXED] * 50


def train(pre_tokenizer, specials: list[str], vocab_size: int = 3000, **model_options) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(**model_options))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer_options = {k: v for k, v in model_options.items() if k in ("continuing_subword_prefix",
                                                                          "end_of_word_suffix")}
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **trainer_options)
    tokenizer.train_from_iterator(training_text(), trainer)
    return tokenizer


def main() -> None:
    made = {}
    roberta = train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    roberta.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    made["roberta"] = roberta
    bert_specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    modernbert = train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["|||IP_ADDRESS|||", "<|padding|>",
                                                                          *bert_specials])
    modernbert.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", modernbert.token_to_id("[CLS]")), ("[SEP]", modernbert.token_to_id("[SEP]"))])
    made["modernbert"] = modernbert
    made["gpt2"] = train(pre_tokenizers.ByteLevel(add_prefix_space=True),
                         ["<|endoftext|>", "<s>", "</s>", "<pad>", "<mask>"])
    made["gpt2_affixes"] = train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<s>", "</s>", "<pad>", "<mask>"],
                                 continuing_subword_prefix="##", end_of_word_suffix="</w>")
    llama = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|end_of_text|>", "<s>", "</s>", "<pad>", "<mask>"], ignore_merges=True)
    made["llama3"] = llama
    for name, tokenizer in made.items():
        config = json.loads(tokenizer.to_str())
        (HERE / f"{name}.json").write_text(json.dumps(config, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
