"""A fast rule-based sentence splitter for books (pure Python).

A sentence ends at `.`, `!` or `?` (closing quotes and brackets stay with it) followed by whitespace
and an upper-case letter, a digit or an opening quote. Not after common abbreviations (Mr., Dr.,
St., e.g.), acronyms of single letters (U.S., a.m.), single initials (J. R. R.) or an ellipsis;
'"Stop!" he cried.' stays one sentence because a lower-case word follows. Paragraph breaks always end a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_CANDIDATE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00c0-\u00de])")
_WORD_BEFORE = re.compile(r"(\S+)$")
_ACRONYM = re.compile(r"^(?:[a-z]\.)+[a-z]$")  # U.S., a.m., e.g.: single letters between periods
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt rev gen col capt lt sgt hon messrs mme mlle
vs etc e.g i.e cf viz ca approx vol ch fig pp ed eds jan feb mar apr jun jul aug sep sept oct nov dec
""".split())


def _is_abbreviation(text: str, end: int) -> bool:
    """Whether the period at text[end] closes an abbreviation or an initial, not a sentence."""
    if text[end] != ".":
        return False
    if end >= 2 and text[end - 2 : end + 1] == "...":  # an ellipsis does not end the sentence
        return True
    match = _WORD_BEFORE.search(text, 0, end)
    if not match:
        return False
    word = match.group(1).lstrip("\"'(\u201c\u2018[").lower()
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or bool(_ACRONYM.match(word))


def split_sentences(paragraph: str) -> Iterator[str]:
    """The sentences of one paragraph, in order; joined with single spaces they tokenize as the
    paragraph does (splits fall on whitespace only)."""
    start = 0
    for match in _CANDIDATE.finditer(paragraph):
        if _is_abbreviation(paragraph, match.start()):
            continue
        cut = match.start() + len(match.group(0).rstrip())
        sentence = paragraph[start:cut].strip()
        if sentence:
            yield sentence
        start = match.end()
    rest = paragraph[start:].strip()
    if rest:
        yield rest


def _word_before(text: str, end: int) -> str:
    """The run of non-whitespace characters ending at text[end] (what `_WORD_BEFORE` finds), found
    by scanning back from `end`: linear in the word, not in the text before it."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:end]


def sentence_breaks(text: str) -> Iterator[int]:
    """Where sentences end in `text` (any length, paragraph breaks not considered): the position of
    the whitespace after each sentence's last character, by the rules of `split_sentences`. A break
    is found only once the character after its whitespace is in `text`."""
    for match in _CANDIDATE.finditer(text):
        end = match.start()
        if text[end] == ".":
            if end >= 2 and text[end - 2: end + 1] == "...":
                continue
            word = _word_before(text, end).lstrip("\"'(\u201c\u2018[").lower()
            if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or _ACRONYM.match(word):
                continue
        yield end + len(match.group(0).rstrip())
