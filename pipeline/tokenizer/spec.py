"""A tokenizer as picklable JSON plus the facts the job derives from it (special ids, vocabulary
size, continuation pieces), and the worker-side `tokenizers.Tokenizer` built from it."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property

from tokenizers import Tokenizer

from pipeline.kernels.chunking import RowLayout
from pipeline.kernels.masking import MaskingRule
from schemas.options import SPECIAL_CLS, SPECIAL_PAD, SPECIAL_SEP, UNIT_TOKEN

# Candidate spellings of each special token, BERT first, then RoBERTa/SentencePiece style.
SPECIAL_CANDIDATES = {
    SPECIAL_CLS: ("[CLS]", "<s>", "<cls>"),
    SPECIAL_SEP: ("[SEP]", "</s>", "<sep>"),
    SPECIAL_PAD: ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
}
_UNUSED = re.compile(r"^\[unused\d+\]$|^<unused\d+>$")


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


def _vocab_size(vocab: dict[str, int]) -> int:
    """Largest id + 1: the size every id-indexed table needs. A vocabulary with gaps in its ids has
    fewer tokens than that, and counting tokens would index past the end of those tables."""
    if not vocab:
        raise TokenizerError("tokenizer has an empty vocabulary")
    lowest, highest = min(vocab.values()), max(vocab.values())
    if lowest < 0 or highest >= 2**31 - 1:
        raise TokenizerError(f"tokenizer ids must lie in [0, 2**31 - 1), got [{lowest}, {highest}]")
    return highest + 1


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
    def from_json(cls, raw: str) -> TokenizerSpec:
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
        vocab_size = _vocab_size(vocab)
        unused = sorted(i for tok, i in vocab.items() if _UNUSED.match(tok))
        is_continuation = _continuation_rule(json.loads(raw))
        continuation = sorted(i for tok, i in vocab.items() if is_continuation(tok) and i not in special)
        return cls(
            json=raw,
            cls_id=ids[SPECIAL_CLS],
            sep_id=ids[SPECIAL_SEP],
            pad_id=ids[SPECIAL_PAD],
            mask_id=ids["mask"],
            vocab_size=vocab_size,
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
                     unit: str = UNIT_TOKEN, span_p: float = 0.2, max_span: int = 10) -> MaskingRule:
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
