"""Compile a chain of `Split` pre-tokenizers to the programs of `kernels...bytelevel.regex_program`.

The regex syntax compiled is an exact subset of what Oniguruma (the engine `tokenizers` runs)
reads; anything outside it is refused with the construct named, and the tokenizer then runs on
the real library:

- alternation, concatenation, groups `(...)`, `(?:...)`, `(?i:...)` (case-insensitive literals only);
- greedy `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}`, `{,n}` (lazy and possessive forms refused: none of the
  real pre-tokenizers uses them);
- single characters: literals and escaped literals (`\\r \\n \\t \\f \\v \\a \\e \\xHH \\x{H..} \\uHHHH`),
  character classes `[...]` (any content, negation, ranges, nested classes), `\\p{..} \\P{..} \\s \\S
  \\d \\D \\w \\W \\h \\H` and `.`;
- a lookahead `(?=X)` / `(?!X)` of one such character (X a single class).

Refused, each with its reason: anchors (`^ $ \\A \\z \\b \\G`...), lookbehind, atomic groups,
back-references, inline option switches `(?i)`, extended mode, other options than `i`, a class
or escape inside `(?i:...)` (the engine's multi-character case folding would need its own model),
a case-insensitive literal whose case folding is more than one character or that several
characters of the pattern fold onto, a group repeated without an upper bound (`(?:ab)+`: a
program's jumps all go forward, which bounds its backtracking stack), a pattern that can match the
empty string, a `Split` behavior other than Isolated, Contiguous and the two Merged ones (Removed
drops text), a program of more than MAX_OPS instructions or more than 64 distinct classes in the chain.

Every single-character atom becomes one bit of a per-code-point table asked of the engine itself:
`(?:X)+` over every code point (cached on disk per `tokenizers` version and set of atoms), so a
class means exactly what it means to the engine. A literal outside `(?i:...)` is its own code point.

Each level's program is then determinized (`_automata`): a state is the ordered list of the
backtracking matcher's paths still alive at a position (`_paths`, `_step`: its order of trying them,
each (instruction, count) kept where first reached, the list cut after a path that has matched), so
the automaton ends a match exactly where the backtracking does, one table load a character. A level
past MAX_DFA_STATES states (a long counted repeat) or a chain past MAX_DFA_ENTRIES entries keeps the
backtracking matcher for that level.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import tokenizers
from tokenizers import Regex
from tokenizers.pre_tokenizers import Split

from pipeline.kernels.tokenizer.bytelevel.regex_program import (
    AHEAD,
    ANY,
    CLASS,
    CONTIGUOUS,
    ISOLATED,
    JMP,
    MATCH,
    MERGED_WITH_NEXT,
    MERGED_WITH_PREVIOUS,
    NOT_AHEAD,
    REPEAT,
    SPLIT,
    pack_program,
)
from pipeline.tokenizer.cut_rule import LLAMA3_CUTS, NO_CUTS, CutRule, is_visible
from pipeline.tokenizer.safety.regexes import UnsafeRegex, check_regex, class_end
from pipeline.tokenizer.table_cache import cached_arrays

MAX_OPS = 4096
MAX_CLASSES = 64
MAX_DFA_STATES = 1024  # a level's automaton; past it the level backtracks
MAX_DFA_ENTRIES = 1 << 22  # the chain's table: 16 MB
_FORMAT = 1
_N_CODE_POINTS = 0x110000
_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_CLASS_ESCAPES = "sSdDwWhH"
_LITERAL_ESCAPES = {"r": "\r", "n": "\n", "t": "\t", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}
_BEHAVIORS = {("Isolated", False): ISOLATED, ("Isolated", True): ISOLATED, ("Contiguous", False): CONTIGUOUS,
              ("Contiguous", True): CONTIGUOUS, ("MergedWithPrevious", False): MERGED_WITH_PREVIOUS,
              ("MergedWithNext", True): MERGED_WITH_PREVIOUS, ("MergedWithNext", False): MERGED_WITH_NEXT,
              ("MergedWithPrevious", True): MERGED_WITH_NEXT}
"""(behavior, invert) as the kernel runs it: with `invert` the gaps are the pieces a behavior joins,
which for the merges is the other merge of the matches (checked against `tokenizers`)."""


class Unsupported(ValueError):
    """A regex or `Split` outside the compiled subset; says which construct and where. `level`: the
    index of the `Split` in the chain."""

    level = 0


# The regex as a tree: ("atom", key), ("seq", [..]), ("alt", [..]), ("repeat", node, low, high),
# ("look", negative, key). An atom's key: ("char", code point) or ("probe", source).


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.i = 0

    def fail(self, what: str) -> Unsupported:
        return Unsupported(f"{what} at {self.i} of the pattern")

    def alternation(self, icase: bool) -> tuple:
        branches = [self.sequence(icase)]
        while self.i < len(self.pattern) and self.pattern[self.i] == "|":
            self.i += 1
            branches.append(self.sequence(icase))
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self, icase: bool) -> tuple:
        items = []
        while self.i < len(self.pattern) and self.pattern[self.i] not in "|)":
            atom = self.atom(icase)
            items.append(self.quantified(atom))
        return ("seq", items)

    def quantified(self, node: tuple) -> tuple:
        p = self.pattern
        if self.i >= len(p):
            return node
        c = p[self.i]
        low = high = None
        if c in "?*+":
            low, high = {"?": (0, 1), "*": (0, -1), "+": (1, -1)}[c]
            self.i += 1
        elif c == "{" and (found := _REPEAT.match(p, self.i)) and (found.group(1) or found.group(2)):
            first, comma, last = found.groups()
            low = int(first or 0)
            high = low if comma is None else (-1 if last == "" else int(last))
            self.i = found.end()
        if low is None:
            return node
        if self.i < len(p) and p[self.i] in "?+":
            raise Unsupported(f"lazy or possessive quantifier {p[self.i - 1:self.i + 1]!r} at {self.i - 1} of "
                              "the pattern")
        if node[0] == "look":
            raise self.fail("a quantified lookahead")
        if high >= 0 and high < low:
            raise self.fail(f"quantifier {{{low},{high}}}")
        return ("repeat", node, low, high)

    def atom(self, icase: bool) -> tuple:
        p, i = self.pattern, self.i
        c = p[i]
        if c == "(":
            return self.group(icase)
        if c in "^$":
            raise self.fail(f"anchor {c!r}")
        if c in "*+?":
            raise self.fail(f"quantifier {c!r} with nothing to repeat")
        if c == "[":
            if icase:
                raise self.fail("a character class inside (?i:...)")
            end = class_end(p, i)  # check_regex has refused an unterminated class
            self.i = end
            return ("atom", ("probe", p[i:end]))
        if c == ".":
            if icase:
                raise self.fail("'.' inside (?i:...)")
            self.i += 1
            return ("atom", ("probe", "."))
        if c == "\\":
            return self.escape(icase)
        self.i += 1
        return self.literal(c, icase)

    def literal(self, char: str, icase: bool) -> tuple:
        if not icase:
            return ("atom", ("char", ord(char)))
        if len(char.casefold()) > 1 or len(char.lower()) > 1 or len(char.upper()) > 1:
            raise self.fail(f"case-insensitive {char!r}, whose case folding is several characters")
        return ("atom", ("probe", f"(?i:{_escaped(char)})"))

    def escape(self, icase: bool) -> tuple:
        p, i = self.pattern, self.i
        if i + 1 >= len(p):
            raise self.fail("a lone backslash")
        c = p[i + 1]
        if c in "pP":
            if not p.startswith("{", i + 2):
                raise self.fail(f"escape {p[i:i + 3]!r} (only \\p{{...}})")
            end = p.find("}", i + 2)
            if end < 0:
                raise self.fail("an unterminated \\p{")
            if icase:
                raise self.fail("a property class inside (?i:...)")
            self.i = end + 1
            return ("atom", ("probe", p[i:end + 1]))
        if c in _CLASS_ESCAPES:
            if icase:
                raise self.fail(f"class escape \\{c} inside (?i:...)")
            self.i = i + 2
            return ("atom", ("probe", "\\" + c))
        if c in _LITERAL_ESCAPES:
            self.i = i + 2
            return self.literal(_LITERAL_ESCAPES[c], icase)
        hexes = (re.compile(r"x\{([0-9A-Fa-f]{1,8})\}"), re.compile(r"x([0-9A-Fa-f]{2})"),
                 re.compile(r"u([0-9A-Fa-f]{4})"))
        for form in hexes:
            found = form.match(p, i + 1)
            if found:
                value = int(found.group(1), 16)
                if value >= _N_CODE_POINTS or 0xD800 <= value < 0xE000:
                    raise self.fail(f"escape {p[i:found.end()]!r} (not a character)")
                self.i = found.end()
                return self.literal(chr(value), icase)
        if c.isascii() and not c.isalnum():
            self.i = i + 2
            return self.literal(c, icase)
        raise self.fail(f"escape {p[i:i + 2]!r} (anchors, back-references and the like are not compiled)")

    def group(self, icase: bool) -> tuple:
        p, i = self.pattern, self.i
        if p.startswith("(?=", i) or p.startswith("(?!", i):
            negative = p[i + 2] == "!"
            self.i = i + 3
            inner = self.alternation(icase)
            self.close()
            key = _single_atom(inner)
            if key is None:
                raise Unsupported(f"lookahead {p[i:self.i]!r} of more than one character class at {i} of the pattern")
            return ("look", negative, key)
        if p.startswith("(?", i):
            found = re.compile(r"\(\?([imx]*)(?:-([imx]*))?([:)])").match(p, i)
            if not found:
                raise self.fail(f"group {p[i:i + 4]!r} (lookbehind, atomic, named and conditional groups "
                                "are not compiled)")
            on, off, end = found.group(1), found.group(2) or "", found.group(3)
            if end == ")":
                raise self.fail(f"inline option switch {found.group(0)!r}")
            if set(on + off) - {"i"}:
                raise self.fail(f"option group {found.group(0)!r} (only i)")
            self.i = found.end()
            inner = self.alternation(icase if not (on or off) else "i" in on)
        else:
            self.i = i + 1
            inner = self.alternation(icase)
        self.close()
        return inner

    def close(self) -> None:
        if self.i >= len(self.pattern) or self.pattern[self.i] != ")":
            raise self.fail("an unclosed group")
        self.i += 1


def _escaped(char: str) -> str:
    return "\\" + char if char.isascii() and not char.isalnum() else char


def _single_atom(node: tuple):
    """The atom key of a node that is exactly one character class, else None."""
    while node[0] == "seq" and len(node[1]) == 1:
        node = node[1][0]
    return node[1] if node[0] == "atom" else None


def _nullable(node: tuple) -> bool:
    kind = node[0]
    if kind == "atom":
        return False
    if kind == "look":
        return True
    if kind == "seq":
        return all(_nullable(n) for n in node[1])
    if kind == "alt":
        return any(_nullable(n) for n in node[1])
    return node[2] == 0 or _nullable(node[1])


def _firsts(node: tuple) -> set:
    """The atom keys a match of `node` can start with."""
    kind = node[0]
    if kind == "atom":
        return {node[1]}
    if kind == "look":
        return set()
    if kind == "alt":
        return set().union(*(_firsts(n) for n in node[1]))
    if kind == "repeat":
        return _firsts(node[1])
    found: set = set()
    for item in node[1]:
        found |= _firsts(item)
        if not _nullable(item):
            break
    return found


def _literal_runs(node: tuple, out: list[str]) -> None:
    """The case-insensitive literal strings of the tree (runs of adjacent `(?i:c)` atoms)."""
    kind = node[0]
    if kind == "seq":
        run = ""
        for item in node[1]:
            if item[0] == "atom" and item[1][0] == "probe" and item[1][1].startswith("(?i:"):
                run += item[1][1][4:-1].lstrip("\\")
                continue
            if len(run) > 1:
                out.append(run)
            run = ""
            _literal_runs(item, out)
        if len(run) > 1:
            out.append(run)
    elif kind == "alt":
        for item in node[1]:
            _literal_runs(item, out)
    elif kind == "repeat":
        _literal_runs(node[1], out)


@lru_cache(maxsize=1)
def _multi_folds() -> str:
    """Characters whose full case folding is several characters (what a case-insensitive literal
    string may match as one character)."""
    return "".join(chr(cp) for cp in range(_N_CODE_POINTS)
                   if not 0xD800 <= cp < 0xE000 and len(chr(cp).casefold()) > 1)


def _check_folds(tree: tuple) -> None:
    """Refuse a case-insensitive literal string that one character of the text can match."""
    runs: list[str] = []
    _literal_runs(tree, runs)
    if not runs:
        return
    folds = _multi_folds()
    text = "\x00".join(folds)
    for run in runs:
        for size in range(2, min(len(run), 3) + 1):
            for start in range(len(run) - size + 1):
                part = run[start:start + size]
                regex = Regex("(?i:" + "".join(_escaped(c) for c in part) + ")")
                kept = Split(regex, behavior="removed").pre_tokenize_str(text)
                if sum(len(piece) for piece, _ in kept) != len(text):
                    raise Unsupported(f"case-insensitive {part!r}, which a single character matches")


@dataclass
class _Emitter:
    keys: dict = field(default_factory=dict)  # atom key -> bit, shared by the chain's levels
    ops: list = field(default_factory=list)

    def bit(self, key) -> int:
        if key not in self.keys:
            if len(self.keys) == MAX_CLASSES:
                raise Unsupported(f"more than {MAX_CLASSES} distinct character classes in the chain")
            self.keys[key] = len(self.keys)
        return self.keys[key]

    def emit(self, op: int, a: int = 0, b: int = 0, c: int = 0) -> int:
        self.ops.append([op, a, b, c])
        if len(self.ops) > MAX_OPS:
            raise Unsupported(f"a program of more than {MAX_OPS} instructions")
        return len(self.ops) - 1

    def node(self, node: tuple) -> None:
        kind = node[0]
        if kind == "atom":
            self.emit(CLASS, self.bit(node[1]))
        elif kind == "look":
            self.emit(NOT_AHEAD if node[1] else AHEAD, self.bit(node[2]))
        elif kind == "seq":
            for item in node[1]:
                self.node(item)
        elif kind == "alt":
            jumps = []
            for k, branch in enumerate(node[1]):
                if k < len(node[1]) - 1:
                    split = self.emit(SPLIT)
                    self.ops[split][1] = split + 1
                    self.node(branch)
                    jumps.append(self.emit(JMP))
                    self.ops[split][2] = len(self.ops)
                else:
                    self.node(branch)
            for jump in jumps:
                self.ops[jump][1] = len(self.ops)
        else:
            self.repeat(*node[1:])

    def repeat(self, body: tuple, low: int, high: int) -> None:
        single = _single_atom(body)
        if single is not None and body[0] != "look":
            self.emit(REPEAT, self.bit(single), low, high)
            return
        if high < 0:
            raise Unsupported("a group repeated without an upper bound (only a single character class "
                              "repeats unboundedly: every jump of a program goes forward)")
        if _nullable(body) and high != 1:
            raise Unsupported("a repeated group that can match the empty string")
        for _ in range(low):
            self.node(body)
        splits = []
        for _ in range(high - low):  # nested optionals: (?:X(?:X)?)?
            splits.append(self.emit(SPLIT))
            self.ops[splits[-1]][1] = splits[-1] + 1
            self.node(body)
        for split in splits:
            self.ops[split][2] = len(self.ops)


class _TooLarge(Exception):
    """A level's automaton past MAX_DFA_STATES or MAX_DFA_ENTRIES: it runs on the backtracking matcher."""


def _paths(ops: np.ndarray, elements: tuple, bits: int | None) -> tuple[list[tuple[int, int]], bool]:
    """The consuming instructions the backtracking matcher reaches from `elements` before it reads
    the next character (whose class bits are `bits`; None at the text's end), in the order it tries
    them, and whether it reaches MATCH first among what is left (the paths after it are never tried).

    An element is (pc, k): instruction pc about to run, k the characters a REPEAT at pc has taken.
    Each (pc, k) is kept once, where first reached: from the same instruction, count and position
    every later path goes on as the first one did, and that one is tried first."""
    found: list[tuple[int, int]] = []
    seen: set = set()
    matched = False

    def visit(pc: int, k: int) -> None:
        nonlocal matched
        if matched or (pc, k) in seen:
            return
        seen.add((pc, k))
        op = int(ops[pc, 0])
        if op == CLASS:
            found.append((pc, 0))
        elif op == REPEAT:
            low, high = int(ops[pc, 2]), int(ops[pc, 3])
            if high < 0 or k < high:  # greedy: one more character first
                found.append((pc, k))
            if k >= low:
                visit(pc + 1, 0)
        elif op == SPLIT:
            visit(int(ops[pc, 1]), 0)
            visit(int(ops[pc, 2]), 0)
        elif op == JMP:
            visit(int(ops[pc, 1]), 0)
        elif op in (NOT_AHEAD, AHEAD):
            has = bits is not None and bool((bits >> int(ops[pc, 1])) & 1)
            if has == (op == AHEAD):
                visit(pc + 1, 0)
        else:
            matched = True

    for pc, k in elements:
        visit(pc, k)
    return found, matched


def _step(ops: np.ndarray, paths: list[tuple[int, int]], bits: int) -> tuple:
    """The elements after a character of class bits `bits` is read by the consuming `paths`, in order."""
    after: list[tuple[int, int]] = []
    for pc, k in paths:
        if not (bits >> int(ops[pc, 1])) & 1:
            continue
        if ops[pc, 0] == CLASS:
            element = (pc + 1, 0)
        else:
            low, high = int(ops[pc, 2]), int(ops[pc, 3])
            element = (pc, min(k + 1, low) if high < 0 else k + 1)  # past `low`, unbounded counts are alike
        if element not in after:
            after.append(element)
    return tuple(after)


def _automaton(ops: np.ndarray, start_pc: int, class_bits: np.ndarray) -> tuple[list, list]:
    """(rows, end flags) of the automaton of the level starting at start_pc, state 0 its start: a
    row per state, the entry of each class (next state << 1) | (a match ends before that
    character), next -1 where no path is left. Raises _TooLarge."""
    classes = [int(b) for b in class_bits]
    index = {((start_pc, 0),): 0}
    order = [((start_pc, 0),)]
    rows, ends = [], []
    while len(rows) < len(order):
        elements = order[len(rows)]
        row = []
        for bits in classes:
            paths, matched = _paths(ops, elements, bits)
            after = _step(ops, paths, bits)
            if after and after not in index:
                if len(order) == MAX_DFA_STATES:
                    raise _TooLarge
                index[after] = len(order)
                order.append(after)
            row.append(((index[after] if after else -1) << 1) | int(matched))
        rows.append(row)
        ends.append(int(_paths(ops, elements, None)[1]))
    return rows, ends


def _automata(ops: np.ndarray, starts: list[int], cp_class: np.ndarray, class_bits: np.ndarray
              ) -> tuple[np.ndarray, list[int]]:
    """(table, each level's start or -1) as `regex_program` takes them, for the levels that
    determinize within MAX_DFA_STATES states and MAX_DFA_ENTRIES table entries: a row of
    129 + classes entries a state (the end flag, the 128 ASCII bytes, the classes), a state named by
    its row's start."""
    width = 129 + len(class_bits)
    ascii_classes = cp_class[:128].astype(np.int64)
    parts: list[np.ndarray] = []
    size = 0
    firsts = []
    for start_pc in starts:
        try:
            rows, ends = _automaton(ops, start_pc, class_bits)
        except _TooLarge:
            firsts.append(-1)
            continue
        if size + len(rows) * width > MAX_DFA_ENTRIES:
            firsts.append(-1)
            continue
        by_class = np.asarray(rows, dtype=np.int64).reshape(len(rows), len(class_bits))
        named = np.where(by_class >= 0, (by_class >> 1) * width * 2 + size * 2 + (by_class & 1), by_class)
        part = np.concatenate([np.asarray(ends, dtype=np.int64)[:, None], named[:, ascii_classes], named], axis=1)
        firsts.append(size)
        parts.append(part.reshape(-1))
        size += part.size
    if not parts:
        return np.zeros(width, dtype=np.int32), firsts
    return np.concatenate(parts).astype(np.int32), firsts


def _ascii_skip(table: np.ndarray, dfa_start: int) -> tuple[int, int]:
    """(m, n): the ASCII bytes a match of the level can start with are those strictly between m and
    n (0 <= m < n <= 128), so a search skips eight bytes at a time of other ASCII bytes; (-1, -1)
    where they are not one range (or the level has no automaton)."""
    if dfa_start < 0:
        return -1, -1
    starts = np.flatnonzero(table[dfa_start + 1:dfa_start + 129] >= 0)
    if starts.shape[0] == 0:
        return 0, 1
    low, high = int(starts[0]), int(starts[-1])
    if low == 0 or high - low + 1 != starts.shape[0]:
        return -1, -1
    return low - 1, high + 1


@dataclass(frozen=True)
class SplitLevel:
    """One `Split` of the chain: its pattern, how its matches become pieces, its parsed tree."""

    pattern: str
    behavior: int
    tree: tuple


@dataclass(frozen=True)
class SplitProgram:
    """The compiled chain, as the kernel takes it (see `regex_program`): ops int64 (n, 4), guards
    uint64 (n,), levels int64 (k, 5), firsts uint64 (k,), cp_class uint16 (N_CODE_POINTS,),
    class_bits uint64 (m,), table int32 (states * (129 + m),)."""

    ops: np.ndarray
    guards: np.ndarray
    levels: np.ndarray
    firsts: np.ndarray
    cp_class: np.ndarray
    class_bits: np.ndarray
    table: np.ndarray
    chain: tuple[SplitLevel, ...]
    keys: tuple

    @property
    def arrays(self) -> tuple:
        """(code, cp_class, table): what the kernel takes (less its state), the program packed in one
        array (`regex_program.pack_program`)."""
        return (pack_program(self.ops, self.guards, self.levels, self.firsts, self.class_bits), self.cp_class,
                self.table)

    def backtracking(self) -> SplitProgram:
        """This chain with every level on the backtracking matcher (no automaton)."""
        levels = self.levels.copy()
        levels[:, 2] = -1
        return replace(self, levels=levels)


def _guards(ops: np.ndarray) -> np.ndarray:
    """Each SPLIT's guard: the bits of the characters its first branch can start with (ANY where
    that branch can match or look ahead before it consumes a character); ANY for the others."""
    guards = np.full(ops.shape[0], ANY, dtype=np.uint64)
    for pc in np.flatnonzero(ops[:, 0] == SPLIT):
        mask, stack, seen = 0, [int(ops[pc, 1])], set()
        while stack:
            q = stack.pop()
            if q in seen:
                continue
            seen.add(q)
            op = ops[q, 0]
            if op == SPLIT:
                stack += [int(ops[q, 1]), int(ops[q, 2])]
            elif op == JMP:
                stack.append(int(ops[q, 1]))
            elif op in (CLASS, REPEAT):
                mask |= 1 << int(ops[q, 1])
                if op == REPEAT and ops[q, 2] == 0:
                    stack.append(q + 1)
            else:  # a lookahead or MATCH before any character
                mask = -1
                break
        if mask >= 0:
            guards[pc] = np.uint64(mask)
    return guards


def parse_split(step: dict) -> SplitLevel:
    """A `Split` pre-tokenizer's JSON as a level of a chain. Raises Unsupported (what, where)."""
    pattern = (step.get("pattern") or {}).get("Regex")
    if pattern is None:
        literal = (step.get("pattern") or {}).get("String")
        if not isinstance(literal, str) or not literal:
            raise Unsupported("a Split without a pattern")
        pattern = "".join(_escaped(c) if not c.isalnum() else c for c in literal)
    behavior = _BEHAVIORS.get((step.get("behavior"), bool(step.get("invert"))))
    if behavior is None:
        raise Unsupported(f"Split behavior {step.get('behavior')} (Removed drops text; only Isolated, "
                          "Contiguous, MergedWithPrevious, MergedWithNext)")
    try:
        check_regex(pattern)
    except UnsafeRegex as error:
        raise Unsupported(f"unsafe regex: {error}") from None
    parser = _Parser(pattern)
    tree = parser.alternation(False)
    if parser.i != len(pattern):
        raise parser.fail("an unbalanced ')'")
    if _nullable(tree):
        raise Unsupported("a pattern that can match the empty string")
    _check_folds(tree)
    return SplitLevel(pattern, behavior, tree)


_PROBE_CHARS = 2048  # the engine's pass over a text costs about 7x more CPU per character in one 1.1M-character call


@lru_cache(maxsize=1)
def _every_code_point() -> tuple[str, np.ndarray]:
    """Every code point but the surrogates, as a str and as uint32."""
    every = np.arange(_N_CODE_POINTS, dtype="<u4")
    every = every[(every < 0xD800) | (every >= 0xE000)]
    return every.tobytes().decode("utf-32-le"), every


def _probe(source: str) -> np.ndarray:
    """bool (N_CODE_POINTS,): the code points the one-character regex `source` matches (the engine
    says: `(?:source)+` over every code point, in slices; a run ends at a slice's end, which changes
    nothing for a one-character regex)."""
    text, cps = _every_code_point()
    found = np.zeros(_N_CODE_POINTS, dtype=bool)
    split = Split(Regex(f"(?:{source})+"), behavior="removed", invert=True)
    for offset in range(0, len(text), _PROBE_CHARS):
        for _, (start, stop) in split.pre_tokenize_str(text[offset:offset + _PROBE_CHARS]):
            found[cps[offset + start:offset + stop]] = True
    return found


def _members(key: tuple) -> np.ndarray:
    """bool (N_CODE_POINTS,) of an atom key: a literal's code point, or the engine's probe (kept on
    disk per `tokenizers` version and atom, so the atoms tokenizers share are probed once)."""
    kind, value = key
    if kind == "char":
        found = np.zeros(_N_CODE_POINTS, dtype=bool)
        found[value] = True
        return found
    stored = cached_arrays("split-atom", f"{_FORMAT}|{tokenizers.__version__}|{value}", ("members",),
                           lambda: {"members": np.packbits(_probe(value))})
    return np.unpackbits(stored["members"], count=_N_CODE_POINTS).astype(bool)


def _class_tables(keys: tuple) -> dict[str, np.ndarray]:
    """cp_class (uint16: each code point's set of bits, numbered) and class_bits (uint64) of the atoms."""
    bits = np.zeros(_N_CODE_POINTS, dtype=np.uint64)
    for bit, key in enumerate(keys):
        bits[_members(key)] |= np.uint64(1) << np.uint64(bit)
    class_bits, cp_class = np.unique(bits, return_inverse=True)
    return {"cp_class": cp_class.astype(np.uint16).reshape(-1), "class_bits": class_bits.astype(np.uint64)}


def compile_chain(steps: list[dict]) -> SplitProgram:
    """The `Split` steps of a pre-tokenizer chain compiled (the atoms' table probed or read from the
    cache). Raises Unsupported naming the first construct outside the subset."""
    chain = []
    for k, step in enumerate(steps):
        try:
            chain.append(parse_split(step))
        except Unsupported as error:
            error.level = k
            raise
    chain = tuple(chain)
    emitter = _Emitter()
    levels, firsts = [], []
    for level in chain:
        start = len(emitter.ops)
        emitter.node(level.tree)
        emitter.emit(MATCH)
        mask = 0
        for key in _firsts(level.tree):
            mask |= 1 << emitter.bit(key)
        levels.append([start, level.behavior])
        firsts.append(mask)
    keys = tuple(emitter.keys)
    tables = _class_tables(keys)
    ops = np.asarray(emitter.ops, dtype=np.int64).reshape(-1, 4)
    table, dfa_starts = _automata(ops, [start for start, _ in levels], tables["cp_class"],
                                             tables["class_bits"])
    levels = [level + [dfa_start, *_ascii_skip(table, dfa_start)] for level, dfa_start in zip(levels, dfa_starts)]
    return SplitProgram(ops=ops, guards=_guards(ops),
                        levels=np.asarray(levels, dtype=np.int64).reshape(-1, 5),
                        firsts=np.asarray(firsts, dtype=np.uint64), cp_class=tables["cp_class"],
                        class_bits=tables["class_bits"], table=table, chain=chain, keys=keys)


def chain_cuts(program: SplitProgram) -> CutRule:
    """LLAMA3_CUTS (before a space or tab after a visible character) where the chain proves them,
    else NO_CUTS.

    Proof, with every level Isolated: at no level can a match hold a visible character followed by
    a space or tab, and no lookahead right after a visible character tells a space or tab from the
    text's end (so the matches left of the cut are the same whether the text goes on or not); and
    the last level has an alternative that is a class holding space and tab, alone or repeated, so
    a match starts at the cut and no gap of the last level spans it. Searching has no lookbehind,
    so the pieces right of the cut are those of the text from the cut."""
    cps = program.cp_class
    visible_bits = np.bitwise_or.reduce(program.class_bits[np.unique(cps[_visible_code_points()])])
    space_bits = [int(program.class_bits[cps[ord(c)]]) for c in " \t"]
    if any(level.behavior != ISOLATED for level in program.chain):
        return NO_CUTS
    ops = program.ops
    starts = list(program.levels[:, 0]) + [len(ops)]
    for k in range(len(program.chain)):
        if not _level_cut_safe(ops, int(starts[k]), int(visible_bits), space_bits):
            return NO_CUTS
    if not _always_matches_space(program.chain[-1].tree, program.keys, space_bits):
        return NO_CUTS
    return LLAMA3_CUTS


@lru_cache(maxsize=1)
def _visible_code_points() -> np.ndarray:
    """The code points `CutRule` counts as visible (letters, marks, numbers, punctuation, symbols),
    kept on disk per Unicode version of Python's `unicodedata`."""
    def build() -> dict[str, np.ndarray]:
        found = [cp for cp in range(_N_CODE_POINTS) if not 0xD800 <= cp < 0xE000 and is_visible(chr(cp))]
        return {"visible": np.array(found, dtype=np.int64)}

    return cached_arrays("visible-code-points", f"{_FORMAT}|{unicodedata.unidata_version}", ("visible",),
                         build)["visible"]


def _level_cut_safe(ops: np.ndarray, start: int, visible_bits: int, space_bits: list[int]) -> bool:
    """No path of the level's program consumes a visible character then a space or tab, and no
    lookahead right after a visible character answers differently for a space or tab and the end."""
    def consumers_after(pc: int, seen: set) -> list[tuple[str, int]]:
        """The consuming or lookahead instructions reachable from pc without consuming."""
        out = []
        stack = [pc]
        while stack:
            q = stack.pop()
            if q in seen:
                continue
            seen.add(q)
            op = ops[q, 0]
            if op == SPLIT:
                stack += [int(ops[q, 1]), int(ops[q, 2])]
            elif op == JMP:
                stack.append(int(ops[q, 1]))
            elif op == REPEAT and ops[q, 2] == 0:
                out.append(q)
                stack.append(q + 1)
            elif op in (CLASS, REPEAT, NOT_AHEAD, AHEAD):
                out.append(q)
                if op in (NOT_AHEAD, AHEAD):
                    stack.append(q + 1)
        return out

    visited: set = set()
    work = [start]
    while work:
        pc = work.pop()
        if pc in visited or ops[pc, 0] == MATCH:
            continue
        visited.add(pc)
        op = ops[pc, 0]
        if op in (SPLIT, JMP):
            work += [int(ops[pc, 1])] + ([int(ops[pc, 2])] if op == SPLIT else [])
            continue
        if op in (NOT_AHEAD, AHEAD):
            work.append(pc + 1)
            continue
        bit = int(ops[pc, 1])
        if not (visible_bits >> bit) & 1:
            work.append(pc + 1)
            continue
        # a consumer that may take a visible character: what can follow it
        following = consumers_after(pc + 1, set())
        if op == REPEAT and (ops[pc, 3] < 0 or ops[pc, 3] > 1):
            following.append(pc)
        for q in following:
            other = int(ops[q, 1])
            takes_space = [bool((s >> other) & 1) for s in space_bits]
            if ops[q, 0] in (CLASS, REPEAT) and any(takes_space):
                return False
            if ops[q, 0] in (NOT_AHEAD, AHEAD) and any(takes_space):
                return False  # sees the space (has the bit) where the end has no character
        work.append(pc + 1)
    return True


def _always_matches_space(tree: tuple, keys: tuple, space_bits: list[int]) -> bool:
    """Whether one top-level alternative is a class holding space and tab, alone or repeated
    (at least once, any greedy maximum): then a match starts at every space or tab."""
    branches = tree[1] if tree[0] == "alt" else [tree]
    index = {key: bit for bit, key in enumerate(keys)}
    for branch in branches:
        node = branch
        while node[0] == "seq" and len(node[1]) == 1:
            node = node[1][0]
        if node[0] == "repeat" and node[2] <= 1:
            node = node[1]
            while node[0] == "seq" and len(node[1]) == 1:
                node = node[1][0]
        if node[0] == "atom" and all((s >> index[node[1]]) & 1 for s in space_bits):
            return True
    return False
