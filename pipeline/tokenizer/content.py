"""No special id ever comes from the text: the tokenizer the job encodes content with.

The job encodes special-token strings in the text ("[SEP]", "<s>" in a book) as plain text
(`encode_special_tokens`), so raw input can never forge a row boundary or a mask. That is not
enough for Unigram: its vocabulary holds the special pieces (`<s>`, `</s>`, `<pad>`, `<mask>`,
`<unk>`, score 0 in the converted SentencePiece models), and the Viterbi lattice picks them from the
text. SentencePiece itself never produces a control symbol from text; here a special piece's
string is emptied in the model's vocabulary (ids, scores and the unknown-piece score unchanged), so
no lattice holds it, on the `hf` backend and in the fast tables alike. This differs from
`tokenizers`' own `encode` only on text holding a special piece's string: `<s>` in a book gives the
ids of `<`, `s`, `>` (as SentencePiece would), never the id of `<s>`.

Other models reach a special token only through their vocabulary (a merge whose result is the
special string, a whole pre-token equal to it): the pre-tokenizers of every shipped family split
special strings at their punctuation, and `SpecialGuard` checks every id the job writes, so a
tokenizer that would produce one stops the job naming the token rather than writing it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np

from pipeline.tokenizer.parsed import parsed


class SpecialIdFromText(ValueError):
    """The tokenizer produced a special id from plain text."""


def special_ids_of(config: dict, roles: dict[str, tuple[str, ...]]) -> set[int]:
    """The ids of a tokenizer.json's special added tokens and of the first token found for each role
    (`roles`: role -> candidate spellings, as spec.SPECIAL_CANDIDATES)."""
    added = config.get("added_tokens") or []
    ids = {t["id"] for t in added if isinstance(t, dict) and t.get("special")}
    model = config.get("model") or {}
    vocab = model.get("vocab")
    by_token = {t.get("content"): t.get("id") for t in added if isinstance(t, dict)}
    if isinstance(vocab, dict):
        by_token = {**vocab, **by_token}
    elif isinstance(vocab, list):
        by_token = {**{entry[0]: i for i, entry in enumerate(vocab)}, **by_token}
    for candidates in roles.values():
        found = [by_token[c] for c in candidates if by_token.get(c) is not None]
        if found:
            ids.add(found[0])
    return ids


def content_tokenizer_json(raw: str, special_ids: set[int]) -> str:
    """The tokenizer.json the job encodes content with: Unigram special pieces emptied (see the
    module docstring); any other model unchanged (the same text is returned). Made once a process
    (the launcher's checks, `build_tokenizer` and the fast encoder all ask)."""
    return _content_json(raw, frozenset(special_ids))


# A JSON escape of one of the letters of "Unigram" (\u0055 U, \u0061 a, \u0067 g, \u0069 i, \u006d m,
# \u006e n, \u0072 r): without "Unigram" or one of these, no model of the file can be a Unigram.
_UNIGRAM_ESCAPES = re.compile(r"\\u00(?:55|6[179dDeE]|72)")


def may_be_unigram(raw: str) -> bool:
    """False where no model in the tokenizer.json text can be of type Unigram (no parse needed)."""
    return "Unigram" in raw or _UNIGRAM_ESCAPES.search(raw) is not None


@lru_cache(maxsize=2)
def _content_json(raw: str, special_ids: frozenset[int]) -> str:
    if not may_be_unigram(raw):
        return raw
    model = parsed(raw).get("model") or {}  # shared: read only
    if model.get("type") != "Unigram" or not isinstance(model.get("vocab"), list):
        return raw
    emptied = [i for i in special_ids if 0 <= i < len(model["vocab"]) and model["vocab"][i][0] != ""]
    if not emptied:
        return raw
    config = json.loads(raw)  # a copy of our own to change
    vocab = config["model"]["vocab"]
    for token_id in emptied:
        vocab[token_id] = ["", vocab[token_id][1]]
    # An added token whose string is not in the vocabulary gets the next free id when the file is
    # read: the special ones emptied above go last, so that the non-special ones keep theirs.
    added = config.get("added_tokens") or []
    config["added_tokens"] = [t for t in added if not t.get("special")] + [t for t in added if t.get("special")]
    return json.dumps(config, ensure_ascii=False)


class AddedTokenRenumbered(ValueError):
    """The content tokenizer numbers a non-special added token otherwise than its file."""


def check_added_ids(tokenizer, config: dict) -> None:
    """Raises AddedTokenRenumbered where `tokenizer` (built from the content tokenizer.json) gives a
    non-special added token of `config` (the file as given) another id."""
    built = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    for token in config.get("added_tokens") or []:
        if not token.get("special") and built.get(token.get("content")) != token.get("id"):
            raise AddedTokenRenumbered(
                f"added token {token.get('content')!r} has id {token.get('id')} in the tokenizer.json but "
                f"{built.get(token.get('content'))} once its special pieces are out of the vocabulary: give the "
                "non-special added tokens the ids after the vocabulary, in order")


class SpecialGuard:
    """Checks content ids for special ids (the unknown-token id is content: unknown characters)."""

    def __init__(self, special_ids: set[int], unk_id: int | None, names: dict[int, str]) -> None:
        ids = sorted(i for i in special_ids if i != unk_id and i >= 0)
        # One False past the largest special id: `take(..., mode="clip")` sends every larger id there,
        # so a check is one pass with no mask or copy of `ids`.
        self._table = np.zeros((max(ids) + 2) if ids else 1, dtype=bool)
        self._table[ids] = True
        self._names = names

    def check(self, ids: np.ndarray) -> None:
        """Raises SpecialIdFromText naming the first special id in `ids`."""
        if not ids.shape[0]:
            return
        hits = np.take(self._table, ids, mode="clip")
        if hits.any():
            token_id = int(ids[np.flatnonzero(hits)[0]])
            raise SpecialIdFromText(
                f"the tokenizer produced the special token {self._names.get(token_id, '?')!r} (id {token_id}) "
                "from plain text: its vocabulary lets text reach it (a merge or vocabulary entry equal to the "
                "special string); remove that entry or merge from the tokenizer.json")
