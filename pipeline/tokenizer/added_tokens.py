"""Non-special added tokens on the fast path: the text split at them exactly as `tokenizers` splits it.

`tokenizers`' AddedVocabulary cuts the text at non-special added tokens before anything else (tokens
with `normalized=False` on the raw text, then `normalized=True` ones on the normalized text of each
part; leftmost-longest; `lstrip`/`rstrip` take the whitespace beside a token, `single_word` keeps only
matches between non-word characters); each part between them is then normalized, pre-tokenized and
encoded on its own. Special tokens are matched too and then dropped (the job encodes their strings as
text, `encode_special_tokens`), so that a special string still hides the added tokens overlapping it.

Finding the matches is left to that same code: a shell tokenizer with the real added tokens and
normalizer, no pre-tokenizer and a one-entry `WordLevel` model, whose tokens other than its unknown one
are the matches with their offsets in the text. Every flag combination is then exact by construction.
The parts between matches go to the family's encoder (built without the added tokens); that is exact
when each part is normalized as `tokenizers` normalizes it:

- tokens matched on the raw text (`normalized=False`), or a normalizer that does nothing: `tokenizers`
  normalizes each part on its own, as the family does;
- `normalized=True` tokens behind a per-character normalizer (`_PER_CHARACTER`): `tokenizers` slices the
  normalized whole text, which equals the normalized part where the first and last characters of the
  match and the character after it are ASCII (a starter no composition or reordering crosses, kept or
  lower-cased alone). Elsewhere that text goes whole to the real tokenizer;
- any other normalizer (Replace, Prepend, Strip, Precompiled: not per character, or bound to the part's
  ends) with `normalized=True` tokens, and a Metaspace that prepends its marker only to the first part
  (`prepend_scheme: first`, which `tokenizers` decides by the part's offset in the text), are refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenizer.components import is_no_op_normalizer, normalizer_function
from pipeline.tokenizer.cut_rule import CutRule

# Normalizers that map each character alone (a composition or reordering never crosses an ASCII character).
_PER_CHARACTER = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "BertNormalizer", "Nmt"}
_ASCII_WHITESPACE = " \t\n\r"
_UNKNOWN = "\x00not an added token\x00"
_UNKNOWN_ID = (1 << 31) - 1  # above every id the shell gives its added tokens


def plain_added(config: dict) -> list[dict]:
    """The non-special added tokens of a tokenizer (parsed tokenizer.json)."""
    return [t for t in config.get("added_tokens") or [] if isinstance(t, dict) and not t.get("special")]


def without_plain_added(config: dict) -> dict:
    """The tokenizer without its non-special added tokens (what a family's encoder sees)."""
    if not plain_added(config):
        return config
    return {**config, "added_tokens": [t for t in config.get("added_tokens") or [] if t.get("special")]}


def _normalizer_steps(node: dict | None) -> list[dict]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [step for child in node.get("normalizers") or [] for step in _normalizer_steps(child)]
    return [node]


def _prepends_first_only(node: dict | None) -> bool:
    if not node:
        return False
    if node.get("type") == "Sequence":
        return any(_prepends_first_only(step) for step in node.get("pretokenizers") or [])
    return node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first"


def added_support(config: dict) -> list[str]:
    """What of a tokenizer's non-special added tokens the fast path cannot split as `tokenizers` does
    (empty: all of them)."""
    added = plain_added(config)
    if not added:
        return []
    problems = []
    normalized = [t["content"] for t in added if t.get("normalized", True)]
    if normalized and not is_no_op_normalizer(config.get("normalizer")):
        other = sorted({step.get("type") for step in _normalizer_steps(config.get("normalizer"))} - _PER_CHARACTER)
        if other:
            problems.append(f"{len(normalized)} added tokens matched on the text normalized by {', '.join(other)} "
                            f"(e.g. {normalized[0]!r}; only per-character normalizers, or normalized=false tokens)")
    normalize = normalizer_function(config)
    forms: dict[tuple[bool, str], list[str]] = {}
    for token in config.get("added_tokens") or []:
        on_normalized = bool(token.get("normalized", not token.get("special")))
        form = normalize(token.get("content") or "") if on_normalized else token.get("content") or ""
        forms.setdefault((on_normalized, form), []).append(token.get("content"))
    same = [names for names in forms.values() if len(names) > 1]
    if same:
        problems.append(f"added tokens {same[0]!r} are matched as one string (which wins is the matcher's order)")
    if _prepends_first_only(config.get("pre_tokenizer")):
        problems.append(f"{len(added)} non-special added tokens with a Metaspace prepend_scheme 'first' "
                        f"(e.g. {added[0]['content']!r}; it marks only the text's first part)")
    return problems


class AddedTokenSplitter:
    """Where a tokenizer's non-special added tokens cut a text (see the module docstring)."""

    def __init__(self, config: dict) -> None:
        added = config.get("added_tokens") or []
        shell = {"version": "1.0", "added_tokens": added, "normalizer": config.get("normalizer"),
                 "pre_tokenizer": None, "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": {_UNKNOWN: _UNKNOWN_ID}, "unk_token": _UNKNOWN}}
        self._shell = Tokenizer.from_str(json.dumps(shell, ensure_ascii=False))
        self._shell.encode_special_tokens = True
        # the shell numbers its added tokens itself: its ids back to the tokenizer's
        self._ids = {self._shell.token_to_id(t["content"]): t["id"] for t in added}
        self.unknown_id = _UNKNOWN_ID
        assert self.unknown_id not in self._ids and len(self._ids) == len(added), "added tokens with one string"
        plain = plain_added(config)
        # Raw text without any token's first character holds no match: skip the shell (a normalizer that does
        # nothing, or only tokens matched on the raw text).
        self._raw_filter = is_no_op_normalizer(config.get("normalizer")) or not any(
            t.get("normalized", True) for t in plain)
        # a match starts with one of these: a few scans of the text instead of one a token
        self._firsts = sorted({t["content"][0] for t in plain if t.get("content")})
        self._byte_firsts = [c.encode("utf-8") for c in self._firsts]
        self._ascii_bounded = not is_no_op_normalizer(config.get("normalizer"))
        self._normalized_ids = {t["id"] for t in plain if t.get("normalized", True)}

    def may_match_bytes(self, data: bytes) -> bool:
        """False when UTF-8 `data` surely holds no added token."""
        return not self._raw_filter or any(c in data for c in self._byte_firsts)

    def matches(self, text: str) -> list[tuple[int, int, int]] | None:
        """(start, stop, id) of each added token in `text` (character offsets, stripped whitespace
        included), in order; None where the parts between them cannot be proven to normalize as in
        the whole text (then the real tokenizer must encode the text)."""
        if self._raw_filter and not any(c in text for c in self._firsts):
            return []
        encoding = self._shell.encode(text, add_special_tokens=False)
        found = [(start, stop, self._ids[token_id]) for token_id, (start, stop) in zip(encoding.ids, encoding.offsets)
                 if token_id != self.unknown_id]
        if self._ascii_bounded:
            for start, stop, token_id in found:
                if token_id in self._normalized_ids and not (
                        text[start].isascii() and text[stop - 1].isascii()
                        and (stop == len(text) or text[stop].isascii())):
                    return None
        return found

    def encode(self, text: str, encode_part: Callable[[str], np.ndarray],
               encode_whole: Callable[[str], np.ndarray]) -> np.ndarray:
        """Ids of `text`: the added tokens' ids, `encode_part` of each part between them (or
        `encode_whole(text)` where `matches` proves nothing)."""
        found = self.matches(text)
        if found is None:
            return encode_whole(text)
        if not found:
            return encode_part(text)
        parts, previous = [], 0
        for start, stop, token_id in found:
            if start > previous:
                parts.append(encode_part(text[previous:start]))
            parts.append(np.asarray([token_id], dtype=np.int32))
            previous = stop
        if previous < len(text):
            parts.append(encode_part(text[previous:]))
        return np.concatenate(parts).astype(np.int32, copy=False)


def cuts_without_straddled(config: dict, rule: CutRule, normalize: Callable[[str], str]) -> CutRule:
    """The rule without the cut characters a non-special added token could straddle: one its string
    holds (or, matched on normalized text, the normalized form of one), and ASCII whitespace when a
    token strips the whitespace beside it (special tokens are never matched: the job encodes their
    strings as text)."""
    drop = set()
    for token in plain_added(config):
        content = token.get("content") or ""
        if token.get("lstrip") or token.get("rstrip"):
            drop.update(_ASCII_WHITESPACE)
        for char in rule.before:
            forms = {char, normalize(char)} if token.get("normalized", True) else {char}
            if any(form and form in content for form in forms):
                drop.add(char)
    kept = "".join(c for c in rule.before if c not in drop)
    return CutRule(kept, rule.after_visible, rule.drop, rule.left, rule.right, rule.invisible)
