"""Where a tokenizer's text may be cut: a `CutRule`, and the rules the known pre-tokenizers prove.

A cut before `text[p]` is safe when encoding `text[:p]` and `text[p:]` apart gives the ids of the
whole text. A family's rule is where its own pre-tokenizer is guaranteed to cut (its kernel relies
on the same cuts); `derived_cuts` proves a rule for any other tokenizer from its parts.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class CutRule:
    """Where text may be cut without changing its ids: before a character of `before`, and with
    `after_visible` only when the character before the cut is visible (a letter, digit, mark,
    punctuation or symbol: never whitespace, a control or format character). With `left`/`right`
    the characters just before and just after the cut character must be among them. With `drop`
    the cut character belongs to neither part (the right part starts after it): a tokenizer that
    prefixes every text with its word marker encodes the dropped space as that prefix. `invisible`:
    characters that count as not visible although their category is (a normalizer turns them into
    nothing or into something ending in whitespace)."""

    before: str
    after_visible: bool
    drop: bool = False
    left: str | None = None
    right: str | None = None
    invisible: frozenset[str] = frozenset()

    def allows(self, text: str, position: int) -> bool:
        """Whether text may be cut before text[position] (0 < position < len(text))."""
        if text[position] not in self.before:
            return False
        previous = text[position - 1]
        if self.left is not None:
            return position + 1 < len(text) and previous in self.left and text[position + 1] in self.right
        if not self.after_visible:
            return True
        if previous in self.invisible:
            return False
        if "!" <= previous <= "~":
            return True
        return previous > "\x7f" and is_visible(previous)

    @property
    def skip(self) -> int:
        """Characters between a cut and the start of the right part (1 with `drop`)."""
        return int(self.drop)


def is_visible(char: str) -> bool:
    """A letter, mark, number, punctuation or symbol (by Unicode category)."""
    return unicodedata.category(char)[0] in "LNMPS"


# Whitespace-splitting pre-tokenizers (BertPreTokenizer) cut at any ASCII whitespace.
WHITESPACE_CUTS = CutRule(" \t\n\r", after_visible=False)
# A space after a visible character starts a new word in every regex and Metaspace pre-tokenizer
# we know (and keeps add_prefix_space / prepend_scheme from adding anything to the next part).
SPACE_CUTS = CutRule(" ", after_visible=True)
# Without a prefix space, any ASCII whitespace after a visible character starts a new pre-token
# of the GPT-2 regex; the Llama-3 regex's punctuation runs take the newlines after them
# (` ?[^\s\p{L}\p{N}]+[\r\n]*`), so there only spaces and tabs.
REGEX_CUTS = CutRule(" \t\n\r", after_visible=True)
LLAMA3_CUTS = CutRule(" \t", after_visible=True)
# A tokenizer that sees the whole text as one piece (SentencePiece without split): never cut.
NO_CUTS = CutRule("", after_visible=True)
