"""Load a tokenizer once in the launcher, ship it as JSON, and tokenize documents in paragraph pieces."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator

import numpy as np
from tokenizers import Tokenizer

from pipeline.chunking import RowLayout
from pipeline.masking import MaskingRule

TOKENIZER_FILE = "tokenizer.json"
# Candidate spellings of each special token, BERT first, then RoBERTa/SentencePiece style.
SPECIAL_CANDIDATES = {
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}
_UNUSED = re.compile(r"^\[unused\d+\]$|^<unused\d+>$")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
# Paragraph pieces longer than this are split at whitespace so no call gets a giant string.
MAX_PIECE_CHARS = 20_000
ENCODE_BATCH = 2048
ENCODE_CHARS = 1 << 20


class TokenizerError(ValueError):
    """The tokenizer cannot be loaded or lacks a special token the job needs."""


def _unk_id(tokenizer: Tokenizer, config: dict) -> int:
    token = (config.get("model") or {}).get("unk_token") or "[UNK]"
    found = tokenizer.token_to_id(token)
    return -1 if found is None else found


def _continuation_rule(config: dict):
    """Which token strings continue a word: WordPiece's prefix (`##`), else pieces without the
    word-start marker of byte-level BPE (`Ġ`) or SentencePiece/Metaspace (`▁`)."""
    model = config.get("model") or {}
    if model.get("type") == "WordPiece":
        prefix = model.get("continuing_subword_prefix") or "##"
        return lambda token: token.startswith(prefix)
    if model.get("continuing_subword_prefix"):
        prefix = model["continuing_subword_prefix"]
        return lambda token: token.startswith(prefix)
    marker = "\u2581" if "Metaspace" in json.dumps(config.get("pre_tokenizer")) or model.get("type") == "Unigram" \
        else "\u0120"
    return lambda token: not token.startswith(marker)


def _looks_like_path(name: str) -> bool:
    """A Hub id is `name` or `org/name`; anything else that does not exist is a missing path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith(".json") or os.sep != "/" and os.sep in name


def resolve_tokenizer_json(name_or_path: str) -> str:
    """Read a `tokenizer.json` from a file, a folder holding one, or the Hub (through the HF cache).

    Raises:
        TokenizerError: naming the path or Hub id that could not be read.
    """
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, TOKENIZER_FILE)
        if not os.path.isfile(path):
            raise TokenizerError(f"tokenizer folder {name_or_path!r} has no {TOKENIZER_FILE}")
        name_or_path = path
    if os.path.isfile(name_or_path):
        with open(name_or_path, encoding="utf-8") as handle:
            raw = handle.read()
    elif _looks_like_path(name_or_path):
        raise TokenizerError(f"tokenizer path {name_or_path!r} does not exist")
    else:
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(repo_id=name_or_path, filename=TOKENIZER_FILE)
        except Exception as error:  # the hub client raises many types; all mean "cannot load"
            raise TokenizerError(
                f"cannot load tokenizer {name_or_path!r}: not a local file or folder, and the Hub "
                f"download failed ({type(error).__name__}: {error})"
            ) from error
        with open(path, encoding="utf-8") as handle:
            raw = handle.read()
    try:
        tokenizer = Tokenizer.from_str(raw)
    except Exception as error:  # tokenizers raises a bare Exception on malformed JSON
        raise TokenizerError(f"{name_or_path!r} is not a valid tokenizer.json: {error}") from error
    # Our chunking decides lengths: whatever truncation or padding the file configures is off.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer.to_str()


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as JSON plus the facts derived from it. Small and picklable: Beam ships it to
    workers, which build the Tokenizer in `DoFn.setup`."""

    json: str
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    unused_ids: tuple[int, ...] = field(default=())
    continuation_ids: tuple[int, ...] = field(default=())
    unk_id: int = -1

    @classmethod
    def from_json(cls, raw: str) -> "TokenizerSpec":
        tokenizer = Tokenizer.from_str(raw)
        ids = {}
        for role, candidates in SPECIAL_CANDIDATES.items():
            found = [tokenizer.token_to_id(tok) for tok in candidates if tokenizer.token_to_id(tok) is not None]
            if not found:
                raise TokenizerError(f"tokenizer has no {role} token (looked for {', '.join(candidates)})")
            ids[role] = found[0]
        special = sorted(i for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special)
        special = sorted(set(special) | set(ids.values()))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        unused = sorted(i for tok, i in vocab.items() if _UNUSED.match(tok))
        is_continuation = _continuation_rule(json.loads(raw))
        continuation = sorted(i for tok, i in vocab.items() if is_continuation(tok) and i not in special)
        return cls(
            json=raw,
            cls_id=ids["cls"],
            sep_id=ids["sep"],
            pad_id=ids["pad"],
            mask_id=ids["mask"],
            vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
            special_ids=tuple(special),
            unused_ids=tuple(unused),
            continuation_ids=tuple(continuation),
            unk_id=_unk_id(tokenizer, json.loads(raw)),
        )

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the canonical tokenizer JSON (after truncation and padding were switched off)."""
        canonical = json.dumps(json.loads(self.json), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def layout(self, seq_len: int, min_tokens: int) -> RowLayout:
        return RowLayout(seq_len=seq_len, cls_id=self.cls_id, sep_id=self.sep_id, pad_id=self.pad_id,
                         min_tokens=min_tokens, unk_id=self.unk_id)

    def masking_rule(self, mlm_probability: float, mask_replace_prob: float, random_replace_prob: float,
                     unit: str = "token", span_p: float = 0.2, max_span: int = 10) -> MaskingRule:
        """Special ids are never selected; random replacements come from ordinary ids only
        (not special, not `[unused*]`)."""
        return MaskingRule.from_ids(self.vocab_size, list(self.special_ids), list(self.unused_ids), self.mask_id,
                                    mlm_probability, mask_replace_prob, random_replace_prob, unit=unit,
                                    continuation_ids=list(self.continuation_ids), span_p=span_p, max_span=max_span)


def build_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    """The worker-side Tokenizer. Special-token strings inside the text ("[SEP]" in a book) are
    tokenized as plain text, so raw input can never forge a row boundary or a mask."""
    tokenizer = Tokenizer.from_str(spec.json)
    tokenizer.encode_special_tokens = True
    return tokenizer


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
    """Paragraph-sized pieces, lazily: split at blank lines, long paragraphs split again at whitespace."""
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        if text[start : match.start()].strip():
            yield from _split_long(text[start : match.start()])
        start = match.end()
    if text[start:].strip():
        yield from _split_long(text[start:])


def _batches(pieces: Iterator[str]) -> Iterator[list[str]]:
    """Groups of pieces of at most ENCODE_BATCH pieces and ENCODE_CHARS characters: one encode call
    never holds the Encoding objects of more than about a megabyte of text."""
    batch: list[str] = []
    chars = 0
    for piece in pieces:
        batch.append(piece)
        chars += len(piece)
        if len(batch) >= ENCODE_BATCH or chars >= ENCODE_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def tokenize_sentences(tokenizer: Tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Content ids of one document and the token count of each sentence (int32 arrays)."""
    from pipeline.sentences import split_sentences

    ids: list[np.ndarray] = []
    lengths: list[int] = []
    sentences = (s for paragraph in iter_paragraphs(text) for s in split_sentences(paragraph))
    for batch in _batches(sentences):
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        lengths.extend(len(e.ids) for e in encodings)
        ids.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32))
    if not ids:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    return np.concatenate(ids), np.asarray(lengths, dtype=np.int32)


def tokenize_text(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """Content ids of one document (no specials), int32, shape (n,), tokenized in batches of pieces."""
    parts: list[np.ndarray] = []
    for batch in _batches(iter_paragraphs(text)):
        encodings = tokenizer.encode_batch_fast(batch, add_special_tokens=False)
        parts.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32))
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate(parts)
