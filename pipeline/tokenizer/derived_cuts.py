"""Where a tokenizer's text may be cut, proven from the tokenizer itself (never from a family name).

A cut before `text[p]` is safe when encoding `text[:p]` and `text[p:]` apart gives the ids of the
whole text. `cut_rule_and_reason` gives the rule and says how it was proven (or why nothing is):

- a tokenizer a fast family covers exactly: that family's rule (its kernel relies on the same cuts);
- otherwise every part must be proven:
  - the normalizer acts on each character alone (Unicode normal forms, Lowercase, StripAccents, Nmt,
    BertNormalizer, ByteLevel, one-character Replace of a literal; a longer literal only keeps the cut
    characters it cannot straddle) and keeps each cut character as it is. ASCII characters are stable
    code points of every normal form: no composition reaches across them. A visible character that
    it turns into nothing or into something ending in whitespace does not count as visible
    (`CutRule.invisible`, probed on every code point);
  - the pre-tokenizer splits there: a whitespace-splitting one (BertPreTokenizer, WhitespaceSplit,
    Whitespace) at any ASCII whitespace, CharDelimiterSplit at its delimiter, ByteLevel with its regex
    or a Split of a written-out pattern (GPT-2's, Llama-3's, Qwen's, Qwen3.6's: `PATTERNS`) at a space
    (tab, newline) after a visible character, Metaspace with split at a space after a visible
    character; the steps after it in a Sequence only split further (one that adds a prefix space
    keeps only the cuts at spaces);
  - with no pre-tokenizer (or a regex-less ByteLevel, which maps bytes to characters), the model: a
    character that is a token alone and that no longer vocabulary entry or merge contains can never
    be merged with a neighbour (BPE without subword affixes, dropout or ignore_merges, Unigram);
  - no added token can straddle a cut: one containing a cut character (or, when matched on normalized
    text, the normalized form of one) removes that character; one that strips whitespace around it
    removes the whitespace characters.
Where nothing is proven the rule has no cut: each document is encoded whole.
"""

from __future__ import annotations

import json
from functools import lru_cache

from pipeline.kernels.tokenizer.bytelevel.encode import GPT2_PATTERN, PATTERNS
from pipeline.tokenizer.added_tokens import cuts_without_straddled as _added_token_filter
from pipeline.tokenizer.added_tokens import plain_added
from pipeline.tokenizer.components import BYTE_CHARS, is_no_op_normalizer
from pipeline.tokenizer.components import invisible_characters as _invisible
from pipeline.tokenizer.components import normalizer_function as _normalize
from pipeline.tokenizer.cut_rule import LLAMA3_CUTS, NO_CUTS, REGEX_CUTS, SPACE_CUTS, WHITESPACE_CUTS, CutRule
from pipeline.tokenizer.families import covered_family_cuts, describe, family_of
from pipeline.tokenizer.parsed import parsed

_PER_CHARACTER = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Nmt", "BertNormalizer", "ByteLevel"}
_WHITESPACE_SPLITTERS = {"BertPreTokenizer", "WhitespaceSplit", "Whitespace"}
# characters a vocabulary may leave unmerged in a tokenizer without pre-tokenizer
VOCABULARY_CANDIDATES = " \t\n\r.,;:!?"


def _steps(node: dict | None, kind: str, key: str) -> list[dict]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [step for child in node.get(key) or [] for step in _steps(child, kind, key)]
    return [node]


def _normalizer_problem(config: dict) -> tuple[str | None, str]:
    """(why the normalizer is not proven per-character, or None; the characters a literal Replace
    longer than one character could straddle)."""
    straddled = ""
    for step in _steps(config.get("normalizer"), "normalizer", "normalizers"):
        kind = step.get("type")
        if kind in _PER_CHARACTER:
            continue
        if kind == "Replace":
            pattern = step.get("pattern") or {}
            if "String" not in pattern:
                return "a Replace normalizer with a regex", straddled
            straddled += pattern["String"][1:]
            continue
        return f"normalizer {kind} (not per-character)", straddled
    return None, straddled


def _pre_tokenizer_rule(config: dict) -> tuple[CutRule | None, str]:
    """The cuts the pre-tokenizer proves on the normalized text (None: none), and how."""
    steps = _steps(config.get("pre_tokenizer"), "pre_tokenizer", "pretokenizers")
    rule, how, changed = None, "", False
    for step in steps:
        kind = step.get("type")
        found: CutRule | None = None
        if changed:
            pass  # a step after a transforming one sees byte or marker characters: it proves nothing here
        elif kind in _WHITESPACE_SPLITTERS:
            found = WHITESPACE_CUTS
        elif kind == "CharDelimiterSplit" and len(step.get("delimiter") or "") == 1:
            found = CutRule(step["delimiter"], after_visible=False)
        elif kind == "ByteLevel" and step.get("use_regex", True):
            found = SPACE_CUTS if step.get("add_prefix_space", True) else REGEX_CUTS
        elif (kind == "Split" and (step.get("pattern") or {}).get("Regex") in PATTERNS
              and step.get("behavior") == "Isolated" and not step.get("invert")):
            found = REGEX_CUTS if step["pattern"]["Regex"] == GPT2_PATTERN else LLAMA3_CUTS
        elif kind == "Metaspace" and step.get("split", True):
            found = SPACE_CUTS
        if found is not None and rule is None:
            rule, how = found, f"pre-tokenizer {kind}"
        if kind in ("ByteLevel", "Metaspace"):
            changed = True
        if rule is not None and _adds_prefix(step):
            rule = _only(rule, " ")
    return rule, how


def _adds_prefix(step: dict) -> bool:
    kind = step.get("type")
    if kind == "ByteLevel":
        return bool(step.get("add_prefix_space", True))
    if kind == "Metaspace":
        return step.get("prepend_scheme", "always" if step.get("add_prefix_space", True) else "never") != "never"
    return False


def _only(rule: CutRule, chars: str) -> CutRule:
    kept = "".join(c for c in rule.before if c in chars)
    return CutRule(kept, rule.after_visible, rule.drop, rule.left, rule.right, rule.invisible)


def _vocabulary_rule(config: dict, normalize) -> tuple[CutRule | None, str]:
    """Cuts the model proves without a pre-tokenizer: before a character it never merges."""
    pre = config.get("pre_tokenizer")
    as_model = (lambda c: c)
    candidates = VOCABULARY_CANDIDATES
    if pre:
        if pre.get("type") != "ByteLevel" or pre.get("use_regex", True):
            return None, ""
        as_model = (lambda c: BYTE_CHARS[ord(c)])
        if pre.get("add_prefix_space", True):
            candidates = " "
    model = config.get("model") or {}
    kind = model.get("type")
    if kind == "BPE":
        if (model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
                or model.get("ignore_merges")):  # a part that is a vocabulary entry would skip the merges
            return None, ""
        vocab = set(model.get("vocab") or {})
        merges = [m.split(" ", 1) if isinstance(m, str) else m for m in model.get("merges") or []]
        merged = {char for pair in merges for part in pair for char in part}
    elif kind == "Unigram":
        vocab = {piece for piece, _ in model.get("vocab") or []}
        merged = set()
    else:
        return None, ""
    inside = {char for token in vocab if len(token) > 1 for char in token} | merged
    byte_fallback = kind == "BPE" and bool(model.get("byte_fallback"))
    safe = ""
    for char in candidates:
        if normalize(char) != char:
            continue
        symbol = as_model(char)
        alone = symbol in vocab or (byte_fallback and f"<0x{ord(char):02X}>" in vocab)
        if alone and symbol not in inside:
            safe += char
    if not safe:
        return None, ""
    return CutRule(safe, after_visible=False), f"{kind} vocabulary (never merges {safe!r})"


def derived_cuts(config: dict) -> tuple[CutRule, str]:
    """The cuts proven from the normalizer, pre-tokenizer, model and added tokens (see the module
    docstring), and how they were proven or why there are none."""
    problem, straddled = _normalizer_problem(config)
    if problem is not None:
        return NO_CUTS, problem
    normalize = _normalize(config)
    rule, how = _pre_tokenizer_rule(config)
    if rule is None:
        rule, how = _vocabulary_rule(config, normalize)
    if rule is None:
        pre = config.get("pre_tokenizer")
        return NO_CUTS, (f"pre-tokenizer {pre.get('type')} and model {(config.get('model') or {}).get('type')} "
                         "prove no cut" if pre else
                         f"no pre-tokenizer and no character the {(config.get('model') or {}).get('type')} "
                         "model never merges")
    rule = _only(rule, "".join(c for c in rule.before if normalize(c) == c and c not in straddled))
    rule = _added_token_filter(config, rule, normalize)
    if not rule.before:
        return NO_CUTS, f"{how}, but its cut characters are changed or straddled (normalizer, added tokens)"
    if rule.after_visible and not is_no_op_normalizer(config.get("normalizer")):
        invisible = _invisible(json.dumps(config["normalizer"], sort_keys=True))
        rule = CutRule(rule.before, rule.after_visible, rule.drop, rule.left, rule.right, invisible)
    return rule, how


def cut_rule_and_reason(config: dict, tokenizer_json: str | None = None) -> tuple[CutRule, str]:
    """Where a tokenizer's text may be cut, and how that is known (or why no cut is). `tokenizer_json`:
    the text `config` was parsed from, where the caller has it."""
    covered = covered_family_cuts(config, tokenizer_json)
    if covered is not None:
        return covered, ("its fast family's pre-tokenizer" if covered.before else
                         _why_no_family_cut(config, tokenizer_json))
    return derived_cuts(config)


def _why_no_family_cut(config: dict, tokenizer_json: str | None) -> str:
    """Why the fast family that covers a tokenizer cuts its text nowhere (for the job's log line):
    its pre-tokenizer proves no cut, or non-special added tokens hold every cut character."""
    family = family_of(config)
    own = family.cuts(config, json.dumps(config, ensure_ascii=False) if tokenizer_json is None else tokenizer_json)
    if not own.before:
        return f"the {family.name} family proves no cut for a {describe(config)}"
    holding = [t.get("content") for t in plain_added(config)
               if t.get("lstrip") or t.get("rstrip") or any(c in (t.get("content") or "") for c in own.before)]
    examples = ", ".join(repr(c) for c in holding[:2]) or "their normalized forms"
    return (f"the {family.name} family cuts before {own.before!r}, but non-special added tokens may straddle "
            f"those characters ({examples})")


def cut_rule(config: dict, tokenizer_json: str | None = None) -> CutRule:
    """Where a tokenizer's text may be cut (`cut_rule_and_reason`)."""
    return cut_rule_and_reason(config, tokenizer_json)[0]


@lru_cache(maxsize=4)
def no_cut_reason(tokenizer_json: str) -> str | None:
    """Why no cut of this tokenizer's text is proven (each document is then encoded whole), or None."""
    rule, reason = cut_rule_and_reason(parsed(tokenizer_json), tokenizer_json)
    return None if rule.before else reason
