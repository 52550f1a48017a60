"""Refuse tokenizer regexes that can backtrack catastrophically, before `tokenizers` runs them.

`tokenizers` runs `Split` pre-tokenizer and `Replace` normalizer patterns with Oniguruma, a
backtracking engine with no time limit, inside one Rust call per batch: nothing can stop a pattern
like `(a+)+$` once it starts, and one crafted `tokenizer.json` tokenized nothing in 90 s (about 2.7
hours for one 143 KB book). A per-input time limit would need a watchdog process per worker that
kills the call and loses its whole batch; refusing the pattern when the tokenizer is loaded costs
nothing while tokenizing. So a pattern is refused, by a conservative static rule:

* a group repeated by an unbounded quantifier (`*`, `+`, `{n,}`, `{n,m}` with m > 1) may not contain
  a quantifier or an alternation: `(a+)+`, `(a|aa)*`, `(\\w+\\s?)*$` are refused. Exponential
  backtracking needs a repeated sub-expression that can match the same text in several ways, which
  needs such nesting;
* back-references and subexpression calls (`\\1`, `\\k<n>`, `\\g<n>`), conditionals and other rare
  group kinds are refused; so is a quantifier stacked on a quantifier (`a**`).

The pattern is read as Oniguruma reads it: option groups (`(?imx-imx)`, which hold until their group
closes, and `(?imx-imx:...)`, also Oniguruma's own `W D S P C I L` and `y{g}`), `(?#...)` comments,
and extended mode (`x`), where whitespace between atoms is dropped and `#` starts a
comment to the end of the line: `(?x)(?:a|aa) +b` is `(?:a|aa)+b` to the engine, so it is refused
too. Whitespace is dropped here wherever Python's `str.isspace` says so, a superset of the engine's
(tab, line feed, form feed, carriage return, space), so a quantifier the engine joins to a group is
never missed.

The patterns of real tokenizers pass: GPT-2's, Llama-3's, cl100k's and o200k's (their alternation
groups are repeated by `?` at most). Adjacent quantifiers (`\\s+(?!\\S)`, GPT-2's own) can cost time
quadratic in a run of matching characters; that bound is what every tokenizer of that family has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PATTERN_LENGTH = 10_000
_REPEAT = re.compile(r"\{(\d+)?(,(\d*))?\}")
# (?i) / (?i-x): changes the options up to the end of its group, holds nothing; (?x: ... ) a group
_OPTIONS = re.compile(r"\(\?((?:[imxWDSPCIL-]|y\{[gw]\})*)([:)])")
_NAMED_GROUP = re.compile(r"\(\?(?:P?<[A-Za-z_][A-Za-z0-9_]*>|'[A-Za-z_][A-Za-z0-9_]*')")


class UnsafeRegex(ValueError):
    """A pattern the static rule cannot prove free of catastrophic backtracking; says which part."""


@dataclass
class _Group:
    start: int
    quantified: bool = False  # holds a quantifier (at any depth)
    alternation: bool = False  # holds a `|` (at any depth)
    extended: bool = False  # the extended mode around the group, back in force when it closes


def _extended_after(options: str, extended: bool) -> bool:
    """Whether extended mode is on after the option letters `options` (`ix-m`: on, `i-x`: off)."""
    on = True
    for c in options:
        if c == "-":
            on = False
        elif c == "x":
            extended = on
    return extended


def _skip_extended(pattern: str, i: int) -> int:
    """Index past the whitespace and `#` comments (to the end of the line) at pattern[i], which the
    engine drops in extended mode."""
    while i < len(pattern):
        if pattern[i].isspace():
            i += 1
        elif pattern[i] == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end + 1
        else:
            break
    return i


def class_end(pattern: str, i: int) -> int:
    """Index just past the character class starting at pattern[i] == '[' (nested classes allowed)."""
    depth, j = 0, i
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
            j += 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):  # a literal ] first in the class
                j += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise UnsafeRegex(f"unterminated character class at {i}")


def _escape_end(pattern: str, i: int) -> int:
    """Index just past the escape starting at pattern[i] == '\\'; refuses back-references and calls."""
    if i + 1 >= len(pattern):
        raise UnsafeRegex("ends with a lone backslash")
    c = pattern[i + 1]
    if c in "123456789" or (c in "kg" and pattern[i + 2:i + 3] in ("<", "'")):
        raise UnsafeRegex(f"back-reference or subexpression call {pattern[i:i + 4]!r} at {i}")
    if c in "pPxo" and pattern.startswith("{", i + 2):
        end = pattern.find("}", i + 2)
        if end < 0:
            raise UnsafeRegex(f"unterminated escape at {i}")
        return end + 1
    return i + 2


def _group_prefix_end(pattern: str, i: int) -> int:
    """Index just past a group's opening (`(`, `(?:`, `(?=`, `(?<name>`, `(?i:` ...)."""
    if not pattern.startswith("(?", i):
        return i + 1
    for prefix in ("(?:", "(?=", "(?!", "(?>", "(?<=", "(?<!"):
        if pattern.startswith(prefix, i):
            return i + len(prefix)
    found = _NAMED_GROUP.match(pattern, i)
    if found:
        return found.end()
    raise UnsafeRegex(f"unsupported group {pattern[i:i + 4]!r} at {i} (conditionals, absence operators, ...)")


def _quantifier(pattern: str, i: int) -> tuple[int, bool] | None:
    """(end, unbounded) of a quantifier at pattern[i], or None when there is none."""
    c = pattern[i]
    if c in "*+":
        return i + 1, True
    if c == "?":
        return i + 1, False
    found = _REPEAT.match(pattern, i) if c == "{" else None
    if not found or (found.group(1) is None and found.group(2) is None):
        return None  # `{` that is not a repeat is a literal
    low = int(found.group(1) or 0)
    if found.group(2) is None:
        return found.end(), low > 1
    high = found.group(3)
    return found.end(), high == "" or int(high) > 1


def check_regex(pattern: str) -> None:
    """Refuse a pattern the static rule (module docstring) does not accept.

    Raises:
        UnsafeRegex: naming the construct and its position in the pattern.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsafeRegex(f"pattern of {len(pattern):,} characters, over the {MAX_PATTERN_LENGTH:,} accepted")
    stack = [_Group(0)]
    last: _Group | str | None = None  # what a quantifier here would repeat: a group, "atom", "quantifier"
    extended = False
    i = 0
    while i < len(pattern):
        if extended:
            i = _skip_extended(pattern, i)
            if i >= len(pattern):
                break
        c = pattern[i]
        if c == "\\":  # Oniguruma has no \Q...\E quoting: \Q is the letter Q
            i, last = _escape_end(pattern, i), "atom"
        elif c == "[":
            i, last = class_end(pattern, i), "atom"
        elif c == "(":
            options = _OPTIONS.match(pattern, i)
            if pattern.startswith("(?#", i):
                end = pattern.find(")", i)
                if end < 0:
                    raise UnsafeRegex(f"unterminated comment at {i}")
                i = end + 1
            elif options and options.group(2) == ")":  # (?x): for the rest of the enclosing group
                i, last = options.end(), None
                extended = _extended_after(options.group(1), extended)
            else:
                stack.append(_Group(i, extended=extended))
                if options:  # (?x: ... ) or (?: ... )
                    i, last = options.end(), None
                    extended = _extended_after(options.group(1), extended)
                else:
                    i, last = _group_prefix_end(pattern, i), None
        elif c == ")":
            if len(stack) == 1:
                raise UnsafeRegex(f"unbalanced ')' at {i}")
            group = stack.pop()
            stack[-1].quantified |= group.quantified
            stack[-1].alternation |= group.alternation
            extended = group.extended
            i, last = i + 1, group
        elif c == "|":
            stack[-1].alternation = True
            i, last = i + 1, None
        elif (quantifier := _quantifier(pattern, i)) is not None:
            end, unbounded = quantifier
            if last == "quantifier":
                raise UnsafeRegex(f"quantifier {pattern[i:end]!r} stacked on a quantifier at {i}")
            if isinstance(last, _Group) and unbounded and (last.quantified or last.alternation):
                inside = "a quantifier" if last.quantified else "an alternation"
                raise UnsafeRegex(f"group {pattern[last.start:i][:60]!r} repeated by {pattern[i:end]!r} holds "
                                  f"{inside}: nested repetition can backtrack exponentially")
            stack[-1].quantified = True
            i, last = end, "quantifier"
            if i < len(pattern) and pattern[i] in "?+":  # lazy or possessive form of the same quantifier
                i += 1
        else:
            i, last = i + 1, "atom"
    if len(stack) != 1:
        raise UnsafeRegex(f"unbalanced '(' at {stack[-1].start}")
