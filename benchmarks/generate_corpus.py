"""Distinct book-like text of any size whose vocabulary grows as the real books' does (Heaps' law).

    python -m benchmarks.generate_corpus --out DIR --mb 45 [--seed 0] [--books ../shared/corpus/books]
        [--book_mb 0.7] [--json FILE]

Why: text repeated (the books ten times over) fills a tokenizer's word and chunk caches as no real
corpus does, so speed figures must come from text seen once. The shared books are 33 MB; past
that this generator writes more, with new words arriving at the books' rate.

How: the books (cleaned as the job cleans them) give the target curve V(n) = K n^beta (distinct
lower-cased words V after n words, fitted on log-log points from 10^4 words on), their vocabulary
ranked by frequency, and a letter model of their words. Each paragraph of L words gets exactly as
many never-seen words as keep V on K (n + L)^beta; every other word repeats an earlier word drawn
uniformly from all the words written so far (Simon's model, which gives Zipf-like frequencies).
A new word is, by turns, the next real word by rank (common words first), a name (capitalised
wherever it appears), a rare word from the letter model, a typo of an earlier word, or a number.
Around the words: sentences of book-like lengths with commas, semicolons, dashes, questions and
exclamations, dialogue in quotes with "said" (half the books with curly quotes and em dashes, the
books' commonest non-ASCII characters), chapter headings, lines wrapped at 72 columns,
blank lines between paragraphs, one title per book. Every paragraph is distinct (a digest of each
is kept; a repeat is rewritten). Same books, size and seed -> byte-identical files.

Prints the real curve, its fit and the generated corpus' own curve (counted from the files written,
with the same word pattern), and the fit of each, so a reader sees that they match.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import math
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.corpus import corpus_files

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|\d+")  # a word for Heaps' law: letters (with inner ') or digits
FIT_FROM = 10_000  # words; below this the curve is still in its first sentences' regime
WRAP = 72
LETTERS = set("abcdefghijklmnopqrstuvwxyzéèêàâçñüöäï")  # the letter model's alphabet (lower-case round-trips)
NEW_KINDS = ("real", "name", "rare", "typo", "number")
KIND_WEIGHTS = (0.55, 0.12, 0.13, 0.10, 0.10)
FIRST_REAL = 300  # the first new words are the books' most frequent ones, in order
REAL_REPEAT = 0.85  # share of repeated words drawn by the books' frequencies (the rest: an earlier word, uniformly)
ROMAN = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
         (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))


def words_of(text: str) -> list[str]:
    """The lower-cased words of `text`, as Heaps' law counts them here."""
    return WORD.findall(text.lower())


def heaps_points(texts: Iterable[str]) -> list[tuple[int, int]]:
    """(n words read, distinct words seen) at `heaps_marks` and at the end, reading `texts` in order."""
    seen: set[str] = set()
    points: list[tuple[int, int]] = []
    n, mark = 0, 1000
    for text in texts:
        for word in words_of(text):
            n += 1
            seen.add(word)
            if n == mark:
                points.append((n, len(seen)))
                mark = mark * 2 if str(mark)[0] in "15" else mark * 5 // 2
    if n and (not points or points[-1][0] != n):
        points.append((n, len(seen)))
    return points


def fit_heaps(points: list[tuple[int, int]], from_n: int = FIT_FROM) -> tuple[float, float]:
    """(K, beta) of V = K n^beta, least squares on log-log points with n >= from_n.

    Raises:
        ValueError: fewer than two such points (too little text to fit).
    """
    used = [(n, v) for n, v in points if n >= from_n]
    if len(used) < 2:
        raise ValueError(f"Heaps' law needs text of at least {2 * from_n:,} words to fit; got {points[-1:]}")
    beta, log_k = np.polyfit(np.log([n for n, _ in used]), np.log([v for _, v in used]), 1)
    return float(math.exp(log_k)), float(beta)


def book_texts(books: Path) -> Iterator[str]:
    """The books' cleaned texts (as the job cleans them), in file order; files that are not text skipped."""
    from pipeline.kernels.text.cleaning import NotText, clean_bytes

    for path in corpus_files(books):
        try:
            yield clean_bytes(path.read_bytes()).text
        except NotText:
            continue


@dataclass(frozen=True)
class RealModel:
    """What the generator takes from real books: the Heaps fit, the curve, the vocabulary by rank and
    a letter model (next letter after two letters)."""

    k: float
    beta: float
    points: list[tuple[int, int]]
    ranked: list[str]
    ranked_cumulative: np.ndarray  # cumulative counts of `ranked`
    letters: dict[str, tuple[str, list[float]]]


def learn(books: Path) -> RealModel:
    """Fit Heaps' law on the books and learn their vocabulary and letters.

    Raises:
        ValueError: no text in `books`, or too little to fit.
    """
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    points: list[tuple[int, int]] = []
    n, mark = 0, 1000
    for text in book_texts(books):
        for word in words_of(text):
            n += 1
            counts[word] += 1
            seen.add(word)
            if n == mark:
                points.append((n, len(seen)))
                mark = mark * 2 if str(mark)[0] in "15" else mark * 5 // 2
    if not n:
        raise ValueError(f"{books}: no text to learn from (give --books a folder of .txt books)")
    if not points or points[-1][0] != n:
        points.append((n, len(seen)))
    k, beta = fit_heaps(points)
    # only words whose upper case comes back to them (headings and capitals must not change the count)
    ranked = sorted((w for w in counts if w.upper().lower() == w and words_of(w.upper()) == [w]),
                    key=lambda w: (-counts[w], w))
    transitions: dict[str, Counter[str]] = {}
    for word in ranked:
        if not set(word) <= LETTERS:
            continue
        padded = "^^" + word + "$"
        for i in range(2, len(padded)):
            transitions.setdefault(padded[i - 2:i], Counter())[padded[i]] += counts[word] ** 0.5
    letters = {}
    for context, following in sorted(transitions.items()):
        chars = sorted(following)
        cumulative = list(np.cumsum([following[c] for c in chars]))
        letters[context] = ("".join(chars), [c / cumulative[-1] for c in cumulative])
    cumulative = np.cumsum([counts[w] for w in ranked], dtype=np.float64)
    return RealModel(k, beta, points, ranked, cumulative, letters)


def roman(number: int) -> str:
    out = []
    for value, numeral in ROMAN:
        while number >= value:
            out.append(numeral)
            number -= value
    return "".join(out)


class Generator:
    """Writes paragraphs of distinct text; `words` is every word written, in order (for the curve)."""

    def __init__(self, model: RealModel, seed: int) -> None:
        self.model = model
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.vocab: list[str] = []  # word id -> lower-cased word
        self.index: dict[str, int] = {}
        self.names: set[int] = set()  # word ids written capitalised
        self.name_list: list[int] = []
        self.tokens = np.zeros(1 << 16, dtype=np.int32)  # word ids written so far, in order
        self.n = 0
        self.next_real = 0
        self.digests: set[bytes] = set()
        self.numbers_from = 10
        self.curly = False  # this book's typography: curly quotes and em dashes, or straight ones

    # words
    def _add(self, word: str) -> int:
        wid = self.index.get(word)
        if wid is None:
            wid = len(self.vocab)
            self.vocab.append(word)
            self.index[word] = wid
        return wid

    def _letters(self, low: int, high: int) -> str:
        for _ in range(50):
            context, out = "^^", []
            while True:
                chars, cumulative = self.model.letters.get(context, ("$", [1.0]))
                c = chars[bisect.bisect_left(cumulative, self.rng.random())] if len(chars) > 1 else chars[0]
                if c == "$" or len(out) > high:
                    break
                out.append(c)
                context = context[1] + c
            word = "".join(out)
            if low <= len(word) <= high and word not in self.index:
                return word
        return "".join(self.rng.choice("bcdfghklmnprstvz") + self.rng.choice("aeiou") for _ in range(4))

    def _typo(self) -> str:
        for _ in range(50):
            base = self.vocab[int(self.tokens[self.rng.randrange(self.n)])] if self.n else "the"
            if len(base) < 4 or not base.isalpha():
                continue
            i = self.rng.randrange(1, len(base) - 1)
            how = self.rng.randrange(4)
            if how == 0:
                word = base[:i] + base[i + 1] + base[i] + base[i + 2:]
            elif how == 1:
                word = base[:i] + base[i + 1:]
            elif how == 2:
                word = base[:i] + base[i] + base[i:]
            else:
                word = base[:i] + self.rng.choice("aeiourstnl") + base[i + 1:]
            if word not in self.index:
                return word
        return self._letters(4, 12)

    def _number(self) -> str:
        while True:
            if self.rng.random() < 0.4:
                word = str(self.rng.randrange(1000, 2100))
            else:
                self.numbers_from += self.rng.randrange(1, 40)
                word = str(self.numbers_from)
            if word not in self.index:
                return word

    def new_word(self) -> int:
        """A word never written before."""
        ranked = self.model.ranked
        while self.next_real < len(ranked) and ranked[self.next_real] in self.index:
            self.next_real += 1
        if self.next_real < len(ranked) and (len(self.vocab) < FIRST_REAL or self.rng.random() < KIND_WEIGHTS[0]):
            kind = "real"
        else:
            kind = self.rng.choices(NEW_KINDS[1:], KIND_WEIGHTS[1:])[0]
        if kind == "real":
            word = ranked[self.next_real]
        elif kind == "name":
            word = self._letters(3, 10)
        elif kind == "rare":
            word = self._letters(6, 16)
        elif kind == "typo":
            word = self._typo()
        else:
            word = self._number()
        wid = self._add(word)
        if kind == "name":
            self.names.add(wid)
            self.name_list.append(wid)
        return wid

    def _emit(self, ids: list[int]) -> None:
        end = self.n + len(ids)
        if end > len(self.tokens):
            self.tokens = np.concatenate([self.tokens, np.zeros(max(end, len(self.tokens)), dtype=np.int32)])
        self.tokens[self.n:end] = ids
        self.n = end

    def content(self, length: int) -> list[int]:
        """`length` word ids for the next paragraph: as many new ones as keep V on the real curve."""
        model = self.model
        target = model.k * (self.n + length) ** model.beta
        fresh = min(length, max(0, round(target) - len(self.vocab))) if self.n else length
        slots = set(self.rng.sample(range(length), fresh)) if fresh < length else set(range(length))
        picks = self.tokens[self.np_rng.integers(0, max(self.n, 1), size=length)]
        known = self.next_real  # the real words written so far are the first `known` by rank
        if known:  # most repeats follow the books' frequencies among them, so "the" is as common as in a book
            ranks = np.searchsorted(model.ranked_cumulative[:known],
                                    self.np_rng.random(length) * model.ranked_cumulative[known - 1], side="right")
            real_ids = [self.index[model.ranked[r]] for r in ranks.tolist()]
            picks = np.where(self.np_rng.random(length) < REAL_REPEAT, real_ids, picks)
        picks = iter(picks.tolist())
        return [self.new_word() if i in slots else next(picks) for i in range(length)]

    # surface
    def _surface(self, wid: int, capital: bool) -> str:
        word = self.vocab[wid]
        return word[:1].upper() + word[1:] if capital or wid in self.names else word

    def _sentence(self, ids: list[int], end: str) -> str:
        out = []
        for i, wid in enumerate(ids):
            out.append(self._surface(wid, i == 0))
            if 0 < i < len(ids) - 2:
                r = self.rng.random()
                if r < 0.07:
                    out[-1] += ","
                elif r < 0.075:
                    out[-1] += ";"
                elif r < 0.079:
                    out[-1] += "\u2014" if self.curly else " --"
        return " ".join(out) + end

    def paragraph(self) -> str:
        """One paragraph of prose or dialogue (its words written), distinct from every earlier one."""
        while True:
            sentences = 1 + min(int(self.np_rng.geometric(0.3)), 12)
            lengths = [3 + min(int(self.np_rng.gamma(2.0, 7.0)), 60) for _ in range(sentences)]
            dialogue = self.rng.random() < 0.25
            said = dialogue and bool(self.name_list) and len(lengths) > 1
            ids = self.content(sum(lengths))
            parts, at = [], 0
            for length in lengths:
                r = self.rng.random()
                end = "?" if r < 0.08 else "!" if r < 0.13 else "."
                parts.append(self._sentence(ids[at:at + length], end))
                at += length
            opening, closing = ("\u201c", "\u201d") if self.curly else ('"', '"')
            if said:
                name = self.name_list[self.rng.randrange(len(self.name_list))]
                said_ids = [self._add("said"), name]
                first = parts[0][:-1] + ("," if parts[0][-1] == "." else parts[0][-1])
                parts = [f"{opening}{first}{closing} said {self._surface(name, True)}. {opening}"
                         + " ".join(parts[1:]) + closing]
                ids = ids[:lengths[0]] + said_ids + ids[lengths[0]:]
            elif dialogue:
                parts = [opening + " ".join(parts) + closing]
            text = " ".join(parts)
            if self._distinct(text):
                self._emit(ids)
                return wrap(text)

    def heading(self, chapter: int) -> str:
        """A chapter heading: its number and a title of two to five words."""
        while True:
            ids = [self._add("chapter"), self._add(roman(chapter).lower()), *self.content(self.rng.randrange(2, 6))]
            words = [self.vocab[i].upper() for i in ids]
            text = f"{words[0]} {words[1]}. " + " ".join(words[2:])
            if self._distinct(text):
                self._emit(ids)
                return text

    def title(self) -> str:
        while True:
            ids = self.content(self.rng.randrange(3, 7))
            text = " ".join(self.vocab[i].upper() for i in ids)
            if self._distinct(text):
                self._emit(ids)
                return text

    def _distinct(self, text: str) -> bool:
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        if digest in self.digests:
            return False
        self.digests.add(digest)
        return True

    def book(self, n_bytes: int) -> str:
        """A book of about `n_bytes`: a title, then chapters of 15-60 paragraphs."""
        self.curly = self.rng.random() < 0.5
        parts, size, chapter, left = [self.title()], 0, 0, 0
        while size < n_bytes:
            if left == 0:
                chapter += 1
                parts.append(self.heading(chapter))
                left = self.rng.randrange(15, 61)
            parts.append(self.paragraph())
            size += len(parts[-1]) + 2
            left -= 1
        return "\n\n".join(parts) + "\n"


def wrap(text: str, width: int = WRAP) -> str:
    """`text` with its spaces turned into line breaks so no line passes `width` (a long word stays whole)."""
    lines, line, size = [], [], 0
    for word in text.split(" "):
        if line and size + 1 + len(word) > width:
            lines.append(" ".join(line))
            line, size = [], 0
        size += len(word) + (1 if line else 0)
        line.append(word)
    lines.append(" ".join(line))
    return "\n".join(lines)


def generate(model: RealModel, out: Path, mb: float, seed: int = 0, book_mb: float = 0.7) -> list[Path]:
    """Write about `mb` MB of distinct text as books of about `book_mb` MB into `out`.

    Raises:
        ValueError: a size that is not positive.
    """
    if mb <= 0 or book_mb <= 0:
        raise ValueError(f"--mb and --book_mb must be positive, got {mb} and {book_mb}")
    out.mkdir(parents=True, exist_ok=True)
    generator, written, paths = Generator(model, seed), 0, []
    book_bytes = int(book_mb * 1e6)
    while written < mb * 1e6:
        data = generator.book(min(book_bytes, int(mb * 1e6 - written))).encode()
        path = out / f"generated_{len(paths):05d}.txt"
        path.write_bytes(data)
        paths.append(path)
        written += len(data)
    return paths


def curves_table(model: RealModel, generated: list[tuple[int, int]]) -> str:
    """The real curve, its fit and the generated curve side by side (V at each n), and both fits."""
    k_gen, beta_gen = fit_heaps(generated)
    real = dict(model.points)
    lines = [f"Heaps' law V = K n^beta (fitted from n = {FIT_FROM:,} words): real books K {model.k:.2f} beta "
             f"{model.beta:.4f}; generated K {k_gen:.2f} beta {beta_gen:.4f}",
             f"{'n words':>12} {'V real':>10} {'V real fit':>11} {'V generated':>12} {'gen / fit':>10}"]
    for n, v in generated:
        fit = model.k * n ** model.beta
        lines.append(f"{n:12,} {real.get(n, 0) or '-':>10} {fit:11,.0f} {v:12,} {v / fit:10.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate_corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the books into (created)")
    parser.add_argument("--mb", type=float, required=True, help="how much text, in MB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--books", default=str(Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
                                               / "books"), help="real books to fit (default ../shared/corpus/books)")
    parser.add_argument("--book_mb", type=float, default=0.7, help="size of each generated book (default 0.7 MB)")
    parser.add_argument("--json", help="write both curves and fits here")
    args = parser.parse_args(argv)
    model = learn(Path(args.books))
    paths = generate(model, Path(args.out), args.mb, args.seed, args.book_mb)
    generated = heaps_points(p.read_text(encoding="utf-8") for p in paths)
    print(curves_table(model, generated))
    k_gen, beta_gen = fit_heaps(generated)
    report = {"books": args.books, "mb": sum(p.stat().st_size for p in paths) / 1e6, "files": len(paths),
              "seed": args.seed, "real": {"k": model.k, "beta": model.beta, "points": model.points},
              "generated": {"k": k_gen, "beta": beta_gen, "points": generated}}
    print(f"{len(paths)} files, {report['mb']:.1f} MB in {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
