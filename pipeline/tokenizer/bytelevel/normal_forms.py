"""An `NFC` or `NFKC` normalizer before a byte-level BPE (the Hub's Qwen2 tokenizer.json has `NFC`).

A text whose every code point is *inert* is already in that normal form, so the kernel encodes it
as it is; any other text is normalized by the tokenizer's own normalizer first, then encoded by the
kernel. Both give the real tokenizer's ids: it normalizes, then pre-tokenizes and encodes the
normalized text, which is what the kernel does with it.

Inert (the Unicode quick check: NFC_QC / NFKC_QC = Yes and canonical combining class 0, which makes
any string of such characters normalized) is probed from `tokenizers` itself, never from Python's
`unicodedata` (another Unicode version): a code point is inert when the real normalizer keeps it
alone, it is no later part of any code point's canonical decomposition (the characters that may
compose with the one before them, in NFC and NFKC alike: QC = Maybe) and, where it does not decompose,
canonical ordering never moves it against U+0334 (class 1) or U+0301 (class 230). A character that
decomposes and that NFC keeps is a starter (decompositions that start with a non-starter are
excluded from composition). Planes 0-3 and 14 are probed (every assigned character so far); the rest
(unassigned planes, private use) counts as not inert: such a text takes the normalizer, exact anyway.
"""

from __future__ import annotations

import json

import numpy as np
import tokenizers
from tokenizers.normalizers import NFD

from pipeline.kernels.tokenizer.bytelevel.encode import N_CODE_POINTS
from pipeline.tokenizer.components import normalizer_of
from pipeline.tokenizer.table_cache import cached_arrays

FORMS = ("NFC", "NFKC")
_FORMAT = 3
_LOW, _HIGH = "\u0334", "\u0301"  # combining classes 1 and 230


def _steps(node: dict | None) -> list[dict]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [step for child in node.get("normalizers") or [] for step in _steps(child)]
    return [node]


def normal_form(normalizer: dict | None) -> tuple[str | None, list[str]]:
    """(the normal form of a byte-level tokenizer's normalizer, None for none; what is not covered)."""
    steps = _steps(normalizer)
    if not steps:
        return None, []
    if len(steps) == 1 and steps[0].get("type") in FORMS:
        return steps[0]["type"], []
    return None, [f"normalizer {'+'.join(str(s.get('type')) for s in steps)} (only none, NFC or NFKC)"]


def _alone(normalize, chars: list[str], before: str = "", after: str = "") -> list[str]:
    """`normalize(before + c + after)` for each character, in one call: newlines between them (a
    starter that composes and reorders with nothing) keep them apart."""
    out = normalize("\n".join(before + c + after for c in chars)).split("\n")
    assert len(out) == len(chars), "a normal form made or removed a newline"
    return out


def probe_inert(form: str) -> np.ndarray:
    """bool, shape (N_CODE_POINTS,): the code points on which `form` (NFC or NFKC) is the identity
    in any string made of them (see the module docstring)."""
    normalize = normalizer_of(json.dumps({"type": form}, sort_keys=True))
    cps = [cp for cp in (*range(0x40000), *range(0xE0000, 0xF0000)) if not (0xD800 <= cp < 0xE000) and cp != 0x0A]
    chars = [chr(cp) for cp in cps]
    kept = np.array([out == c for out, c in zip(_alone(normalize, chars), chars)])
    nfd = NFD().normalize_str
    decomposed = _alone(nfd, chars)
    later = {char for out in decomposed for char in out[1:]}
    plain = [out == c for out, c in zip(decomposed, chars)]
    moved_low = [out != c + _LOW for out, c in zip(_alone(nfd, chars, after=_LOW), chars)]
    moved_high = [out != _HIGH + c for out, c in zip(_alone(nfd, chars, before=_HIGH), chars)]
    inert = np.zeros(N_CODE_POINTS, dtype=bool)
    for index, cp in enumerate(cps):
        inert[cp] = kept[index] and chars[index] not in later and not (
            plain[index] and (moved_low[index] or moved_high[index]))
    inert[0x0A] = True  # the separator above: ASCII, class 0, kept by every normal form
    return inert


def cached_inert(form: str) -> np.ndarray:
    """The probed table, kept on disk per `tokenizers` version (probing takes a few seconds)."""
    key = f"{_FORMAT}|{form}|{tokenizers.__version__}"
    return cached_arrays("normal-form-inert", key, ("inert",), lambda: {"inert": probe_inert(form)})["inert"]


class NormalForm:
    """The tokenizer's NFC / NFKC normalizer where a text needs it."""

    def __init__(self, form: str) -> None:
        self.form = form
        self.inert = cached_inert(form)
        self.ascii_inert = bool(self.inert[:128].all())
        self._normalize = normalizer_of(json.dumps({"type": form}, sort_keys=True))

    def apply(self, text: str) -> str:
        """`text` in the normal form: itself where every code point is inert; a text with a lone
        surrogate (not UTF-8: the caller's real tokenizer takes it) as it is."""
        if text.isascii() and self.ascii_inert:
            return text
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        if self.inert[cps].all():
            return text
        if ((cps >= 0xD800) & (cps < 0xE000)).any():
            return text
        return self._normalize(text)
