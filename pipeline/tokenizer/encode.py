"""Tokenize documents exactly: the ids of a document are the real tokenizer's
`encode(whole document, add_special_tokens=False)`, whatever backend and whatever pieces the
document arrives in.

Text is only ever cut where the tokenizer is proven to cut (its `cut_rule.CutRule`, from
`derived_cuts`; where nothing is proven, nowhere: the document is encoded whole): a piece is
encoded up to its last such cut and the rest is held back and put before the next piece
(`DocumentEncoder`). With sentence packing, sentences end at the cut that follows a sentence end
or paragraph break (`sentence_breaks`, blank lines); for whitespace-splitting tokenizers that is
the whitespace itself, for byte-level BPE and SentencePiece the whitespace goes with the next
sentence (it is that sentence's first token's marker). Sentence ends are found only where the
text that decides them is present, so a piece end is never a sentence end.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator

import numpy as np
from tokenizers import Tokenizer

from pipeline.kernels.text.sentences import sentence_breaks
from pipeline.tokenizer.content import SpecialGuard
from pipeline.tokenizer.cut_rule import CutRule, is_visible
from pipeline.tokenizer.errors import is_panic, panic_error
from pipeline.tokenizer.facts import TokenizerFacts
from pipeline.tokenizer.fast import FastTokenizer

AnyTokenizer = Tokenizer | FastTokenizer

# Blank lines: only tabs and spaces between the newlines and after them (Python's `\s` would take
# U+001C..U+001F, which tokenizers keep as text).
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n[ \t\n]*")
_SENTENCE_CLOSERS = frozenset(".!?\"')]\u201d\u2019")
MAX_PIECE_CHARS = 20_000  # the real tokenizer gets pieces of about this size (cut where it cuts)
ENCODE_BATCH = 2048
ENCODE_CHARS = 1 << 20
MAX_CARRY_CHARS = 64 << 20  # text held back waiting for a cut: a longer document is skipped (DocumentTooLong)
PARTIAL_CHARS = 1 << 16  # a sentence in progress longer than this is encoded up to a resume point
_EMPTY = np.zeros(0, dtype=np.int32)


class DocumentTooLong(ValueError):
    """A document ran past MAX_CARRY_CHARS characters without a place where its text may be cut."""


def _split_long(piece: str) -> Iterator[str]:
    """Cut a paragraph longer than MAX_PIECE_CHARS at whitespace (hard cut if there is none)."""
    start = 0
    while len(piece) - start > MAX_PIECE_CHARS:
        cut = piece.rfind(" ", start + 1, start + MAX_PIECE_CHARS)
        if cut <= start:
            newline = piece.rfind("\n", start + 1, start + MAX_PIECE_CHARS)
            cut = newline if newline > start else start + MAX_PIECE_CHARS
        yield piece[start:cut]
        start = cut
    yield piece[start:] if start else piece


def iter_paragraphs(text: str) -> Iterator[str]:
    """Paragraph-sized pieces, lazily: split at blank lines, long paragraphs split again at whitespace
    (for tokenizer training and benchmarks; never to tokenize a document: the breaks are dropped)."""
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        if text[start : match.start()].strip():
            yield from _split_long(text[start : match.start()])
        start = match.end()
    if text[start:].strip():
        yield from _split_long(text[start:])


def cuts_of(tokenizer: AnyTokenizer) -> CutRule:
    """Where a tokenizer's text may be cut, proven from the tokenizer itself (`derived_cuts`): from
    its whole JSON (its vocabulary and added tokens decide some cuts), once per tokenizer object."""
    if isinstance(tokenizer, FastTokenizer):
        return tokenizer.cuts
    return TokenizerFacts.of(tokenizer).cuts


def guard_of(tokenizer: AnyTokenizer) -> SpecialGuard:
    """The check that no special id comes from the text (content.py), once per tokenizer object."""
    real = tokenizer.tokenizer if isinstance(tokenizer, FastTokenizer) else tokenizer
    return TokenizerFacts.of(real).guard


def first_cut(text: str, rule: CutRule, start: int) -> int:
    """The first position >= max(start, 1) where `rule` allows a cut, or -1."""
    start = max(start, 1)
    while rule.before:
        found = [p for p in (text.find(c, start) for c in rule.before) if p >= 0]
        if not found:
            return -1
        p = min(found)
        if rule.allows(text, p):
            return p
        start = p + 1
    return -1


def last_cut(text: str, rule: CutRule, stop: int | None = None) -> int:
    """The last position in [1, stop) where `rule` allows a cut, or -1."""
    stop = len(text) if stop is None else stop
    while rule.before:
        p = max(text.rfind(c, 1, stop) for c in rule.before)
        if p < 1:
            return -1
        if rule.allows(text, p):
            return p
        stop = p
    return -1


def is_resume_point(text: str, rule: CutRule, position: int) -> bool:
    """A cut after which text can be analysed on its own: allowed by the rule, after a visible
    character that cannot end a sentence (so no sentence end or paragraph break straddles it)."""
    previous = text[position - 1]
    visible = "!" <= previous <= "~" or (previous > "\x7f" and is_visible(previous))
    return visible and previous not in _SENTENCE_CLOSERS and rule.allows(text, position)


def _horizon(text: str) -> int:
    """Where the trailing run of sentence closers and whitespace starts: sentence ends and paragraph
    breaks before it are decided by `text`, those in it depend on what follows."""
    end = len(text)
    while end > 0 and (text[end - 1] in _SENTENCE_CLOSERS or text[end - 1].isspace()):
        end -= 1
    return end


def first_resume_point(text: str, rule: CutRule, start: int = 1) -> int:
    """The first resume point >= max(start, 1), or -1."""
    p = first_cut(text, rule, start)
    while p >= 0 and not is_resume_point(text, rule, p):
        p = first_cut(text, rule, p + 1)
    return p


def _pieces(text: str, rule: CutRule, size: int) -> Iterator[str]:
    """`text` in pieces of about `size` characters (more where no cut is allowed), cut by `rule`."""
    start = 0
    while len(text) - start > size:
        cut = first_cut(text, rule, start + size)
        if cut < 0:
            break
        yield text[start:cut]
        start = cut + rule.skip
    if start < len(text):
        yield text[start:] if start else text


def encode_segments(tokenizer: AnyTokenizer, segments: list[str]) -> list[np.ndarray]:
    """The ids of each segment (each starting and ending at allowed cuts), int32 arrays.

    Raises:
        SpecialIdFromText: a special id came out of the text (content.py)."""
    rule = cuts_of(tokenizer)
    guard = guard_of(tokenizer)
    if isinstance(tokenizer, FastTokenizer):
        return _encode_fast(tokenizer, segments, rule, guard.check)
    return _encode_real(tokenizer, segments, rule, guard.check)


def _encode_fast(tokenizer: FastTokenizer, segments: list[str], rule: CutRule,
                 check: Callable[[np.ndarray], None]) -> list[np.ndarray]:
    """Each segment in slices of at most the family's `slice_chars` (cut by `rule`)."""
    size = sys.maxsize if tokenizer.slice_chars is None else tokenizer.slice_chars
    out: list[np.ndarray] = []
    for segment in segments:
        parts = [tokenizer.encode(part) for part in _pieces(segment, rule, size)]
        out.append(parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else _EMPTY)
        check(out[-1])
    return out


def _encode_real(tokenizer: Tokenizer, segments: list[str], rule: CutRule,
                 check: Callable[[np.ndarray], None]) -> list[np.ndarray]:
    """Each segment in pieces of about MAX_PIECE_CHARS (cut by `rule`), encoded in batches of at
    most ENCODE_BATCH pieces or ENCODE_CHARS characters."""
    batch: list[str] = []
    owners: list[int] = []
    chars = 0
    results: list[list[np.ndarray]] = [[] for _ in segments]

    def flush() -> None:
        try:
            encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        except BaseException as error:  # a Rust panic is a BaseException: one named error instead
            if is_panic(error):
                raise panic_error(error) from None
            raise
        for owner, encoding in zip(owners, encodings):
            results[owner].append(np.asarray(encoding.ids, dtype=np.int32))
            check(results[owner][-1])
        batch.clear()
        owners.clear()

    for index, segment in enumerate(segments):
        for part in _pieces(segment, rule, MAX_PIECE_CHARS):
            batch.append(part)
            owners.append(index)
            chars += len(part)
            if len(batch) >= ENCODE_BATCH or chars >= ENCODE_CHARS:
                flush()
                chars = 0
    if batch:
        flush()
    return [parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else _EMPTY for parts in results]


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else _EMPTY


def nonzero_lengths(lengths: np.ndarray | None) -> np.ndarray | None:
    """Sentence lengths without the sentences that hold no token (whitespace between two ends)."""
    return lengths if lengths is None or lengths.all() else lengths[lengths > 0]


def tokenize_text(tokenizer: AnyTokenizer, text: str) -> np.ndarray:
    """Content ids of one whole document (no specials), int32, shape (n,): those of
    `encode(text, add_special_tokens=False)` of the real tokenizer."""
    return _concat(encode_segments(tokenizer, [text]))


def tokenize_sentences(tokenizer: AnyTokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Content ids of one whole document and the token count of each sentence (int32 arrays)."""
    encoder = DocumentEncoder(tokenizer, sentences=True)
    ids, lengths = encoder.feed(text)
    last_ids, last_lengths = encoder.finish()
    return np.concatenate([ids, last_ids]), nonzero_lengths(np.concatenate([lengths, last_lengths]).astype(np.int32))


class DocumentEncoder:
    """Encodes a document fed in pieces cut anywhere, with the ids of the whole document (and, with
    `sentences`, the lengths of its sentences, each given once it is complete).

    `feed(piece)` returns the ids (and complete sentences' lengths) that are final; `finish()` the
    rest. With `sentences`, `finish(last_sentence=False)` leaves the last sentence open: its ids are
    returned without a length (a byte range whose document goes on in the next range)."""

    def __init__(self, tokenizer: AnyTokenizer, sentences: bool = False, open_sentence: bool = False) -> None:
        self.tokenizer = tokenizer
        self.rule = cuts_of(tokenizer)
        self.sentences = sentences
        self._carry = ""
        self._partial: list[np.ndarray] = []  # ids of the open sentence's text before the carry
        # whether the carry starts inside a sentence (at a resume point: after a partial encoding, or
        # at the start of a byte range), so that a break right at its start ends that sentence
        self._open = open_sentence

    def feed(self, piece: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The ids (int32) and, with `sentences`, the lengths of the sentences completed so far."""
        buffer = self._carry + piece if self._carry else piece
        if not self.sentences:
            cut = last_cut(buffer, self.rule)
            if cut < 0:
                self._carry = buffer
                self._check_carry()
                return _EMPTY, None
            self._carry = buffer[cut + self.rule.skip:]
            self._check_carry()
            return tokenize_text(self.tokenizer, buffer[:cut]), None
        out = self._sentences(buffer, final=False)
        self._check_carry()
        return out

    def _check_carry(self) -> None:
        if len(self._carry) > MAX_CARRY_CHARS:
            where = (f"at {self.rule.before!r}" if self.rule.before else "anywhere (no cut is proven: it is "
                     "encoded whole)")
            raise DocumentTooLong(f"a document runs past {MAX_CARRY_CHARS:,} characters where the tokenizer may "
                                  f"cut its text only {where}: split it into smaller documents")

    def finish(self, last_sentence: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """The ids (and sentence lengths) of what is held back, at the end of the document."""
        buffer, self._carry = self._carry, ""
        if not self.sentences:
            return (tokenize_text(self.tokenizer, buffer) if buffer else _EMPTY), None
        ids, lengths = self._sentences(buffer, final=True)
        tail = _concat([*self._partial, tokenize_text(self.tokenizer, self._carry)])
        self._partial, self._carry = [], ""
        if last_sentence and tail.shape[0]:
            lengths = np.append(lengths, tail.shape[0]).astype(np.int32)
        return np.concatenate([ids, tail]), lengths

    def _breaks(self, buffer: str, final: bool) -> list[int]:
        """The cuts that end sentences in buffer, which starts at a sentence start or, with an open
        sentence, at a resume point (then a break right there closes that sentence: a cut at 0)."""
        horizon = len(buffer) if final else _horizon(buffer)
        ends = {m.start() for m in _PARAGRAPH_BREAK.finditer(buffer, 0, horizon)}
        ends.update(sentence_breaks(buffer if final else buffer[:horizon]))
        cuts: list[int] = []
        for end in sorted(ends):
            if end == 0:
                if self._open:
                    cuts.append(0)
                continue
            if cuts and end <= cuts[-1]:
                continue
            cut = first_cut(buffer, self.rule, end)
            if cut < 0 and final:
                # no cut after the end in what is left: the buffer's end is the first (the document's
                # end, or a byte range's end, which lies on a resume point)
                cut = len(buffer)
            if cut > 0 and (not cuts or cut > cuts[-1]):
                cuts.append(cut)
        return cuts

    def _sentences(self, buffer: str, final: bool) -> tuple[np.ndarray, np.ndarray]:
        cuts = self._breaks(buffer, final)
        skip = self.rule.skip  # a cut at 0 (an open sentence's end) is where the carry starts: nothing to skip
        segments = [buffer[a + skip if a else 0:b] for a, b in zip([0, *cuts[:-1]], cuts)]
        encoded = encode_segments(self.tokenizer, segments)
        if encoded:
            encoded[0] = _concat([*self._partial, encoded[0]])
            self._partial = []
        start = cuts[-1] + skip if cuts and cuts[-1] else 0
        self._carry = buffer[start:]
        self._open = self._open and not cuts
        if not final and len(self._carry) > PARTIAL_CHARS:
            horizon = _horizon(self._carry)
            resume = first_resume_point(self._carry, self.rule, len(self._carry) // 2)
            if 0 < resume < horizon:
                self._partial.append(tokenize_text(self.tokenizer, self._carry[:resume]))
                self._carry = self._carry[resume + skip:]
                self._open = True
        lengths = np.asarray([e.shape[0] for e in encoded], dtype=np.int32)
        return _concat(encoded), lengths
