"""Bound what a tokenizer's normalizer can make of a text, before any text is tokenized.

A normalizer runs inside `tokenizers` on each piece the job hands it (at most
`encode.MAX_PIECE_CHARS` characters), and `tokenizers` keeps two alignment offsets per byte of what
it produces: a `Replace` of `e` by 12,000 `e` (which every other check passed) took 1.48 GB for a
174 KB book. Real normalizers grow a text little: NFKC's largest expansion is 18 characters for
one (U+FDFA), BERT's puts two spaces around a CJK character, `Prepend` adds its few characters once.

So the growth is probed when the tokenizer is loaded: the normalizer is run on every code point its
JSON mentions (patterns, replacements, prepended text), on each of those strings whole and doubled
(multi-character patterns), and on a sample of the rest (all of Latin up to U+024F, every 64th
code point of the Basic Multilingual Plane, the known largest expansions, a few astral ones). A
normalizer that makes more than MAX_GROWTH characters of one probe character is refused. The probe
is a few thousand short calls (milliseconds). Not covered: a normalizer that expands only code
points neither mentioned nor sampled (a crafted `Precompiled` charsmap, whose replacements are in a
binary table, could); a `Replace` always mentions what it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache

MAX_GROWTH = 32  # characters out per character in; real normalizers: 18 at most (NFKC of U+FDFA)
_LARGEST_KNOWN = "\ufdfa\ufdfb\u3300\u33ff\u2474\u2488\u01c4\ufb03\u0390\u1f82"


class NormalizerGrowth(ValueError):
    """The normalizer makes too much text of a probe; the message names the probe and the factor."""


def _strings(node) -> Iterator[str]:
    """Every string in a normalizer's JSON (patterns, contents, prepended text, type names)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


@lru_cache(maxsize=1)
def _sample() -> tuple[str, ...]:
    points = [*range(0x20, 0x250), *range(0x250, 0x10000, 64), 0x1F600, 0x1D400, 0x20000, 0xE0041]
    chars = {chr(p) for p in points if not 0xD800 <= p < 0xE000} | set(_LARGEST_KNOWN)
    return tuple(sorted(chars))


def probes(normalizer_json) -> list[str]:
    """The probe strings for a normalizer's JSON (see the module docstring), short ones only."""
    mentioned = [s for s in _strings(normalizer_json) if s]
    found = set(_sample())
    for text in mentioned:
        found.update(text)
        if len(text) <= 64:
            found.update((text, text * 2))
    return sorted(found)


def check_growth(normalize: Callable[[str], str], normalizer_json) -> float:
    """The largest growth (characters out per character in) over the probes; raises past MAX_GROWTH.

    Raises:
        NormalizerGrowth: naming the probe that grew most, what it became, and the bound.
    """
    worst, worst_probe, worst_out = 1.0, "", 0
    for probe in probes(normalizer_json):
        out = len(normalize(probe))
        if out / len(probe) > worst:
            worst, worst_probe, worst_out = out / len(probe), probe, out
    if worst > MAX_GROWTH:
        unit = "character" if len(worst_probe) == 1 else "characters"
        raise NormalizerGrowth(f"normalizer makes {worst_out:,} characters of {worst_probe[:20]!r} "
                               f"({len(worst_probe)} {unit}): {worst:,.0f}x, over the {MAX_GROWTH}x accepted "
                               f"(a book would take that many times its size, times 16 bytes a character, in memory)")
    return worst
