"""Sentence splitters for `--packing sentences`: ours against pysbd, blingfire and NLTK's punkt
(trained unsupervised on the corpus, since its pretrained model is a download) on a golden set of
book sentences (dialogue, abbreviations, initials, ellipses), and their speed on real books.

    python -m benchmarks.sentences [--corpus ../shared/corpus/books]

Not part of the test run. Prints per-splitter boundary precision/recall, paragraphs split exactly
right, and MB/s; the tools it compares are optional (`pip install pysbd blingfire nltk`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.kernels.text.cleaning import clean_bytes
from pipeline.kernels.text.sentences import split_sentences
from pipeline.tokenizer.encode import iter_paragraphs

GOLDEN = Path(__file__).parent / "data" / "sentences_golden.json"


def _boundaries(paragraph: str, sentences: list[str]) -> set[int]:
    """Character offsets where a sentence after the first starts."""
    out, position = set(), 0
    for sentence in sentences:
        found = paragraph.find(sentence.strip(), position)
        if found < 0:
            continue
        if found > 0:
            out.add(found)
        position = found + len(sentence.strip())
    return out


def score(split: Callable[[str], list[str]], golden: list[list[str]]) -> dict:
    tp = fp = fn = exact = 0
    for sentences in golden:
        paragraph = " ".join(sentences)
        want = _boundaries(paragraph, sentences)
        got = _boundaries(paragraph, [s for s in split(paragraph) if s.strip()])
        tp, fp, fn = tp + len(want & got), fp + len(got - want), fn + len(want - got)
        exact += want == got
    return {"precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1), "exact": exact / len(golden)}


def splitters(corpus_text: str) -> dict[str, Callable[[str], list[str]]]:
    found: dict[str, Callable[[str], list[str]]] = {"maskbeam": lambda p: list(split_sentences(p))}
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="en", clean=False)
        found["pysbd"] = segmenter.segment
    except ImportError:
        pass
    try:
        import blingfire

        found["blingfire"] = lambda p: blingfire.text_to_sentences(p).split("\n")
    except ImportError:
        pass
    try:
        from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer

        trainer = PunktTrainer()
        trainer.INCLUDE_ALL_COLLOCS = True
        trainer.train(corpus_text[:20_000_000], finalize=True)
        found["punkt (trained on the corpus)"] = PunktSentenceTokenizer(trainer.get_params()).tokenize
    except ImportError:
        pass
    return found


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="../shared/corpus/books")
    parser.add_argument("--books", type=int, default=6, help="books to time each splitter on")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    books = sorted(Path(args.corpus).glob("*.txt"))
    texts = []
    for path in books:
        try:
            texts.append(clean_bytes(path.read_bytes()).text)
        except ValueError:
            continue
    paragraphs = [p for text in texts[: args.books] for p in iter_paragraphs(text)]
    megabytes = sum(len(p.encode()) for p in paragraphs) / 1e6
    results = {}
    for name, split in splitters("\n\n".join(texts)).items():
        quality = score(split, golden)
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for paragraph in paragraphs:
                split(paragraph)
            times.append(time.perf_counter() - started)
        quality["mb_per_s"] = megabytes / statistics.median(times)
        results[name] = quality
        print(f"{name:32s} precision {quality['precision']:.3f} recall {quality['recall']:.3f} "
              f"exact {quality['exact']:.2f} speed {quality['mb_per_s']:.2f} MB/s")
    return results


if __name__ == "__main__":
    main()
