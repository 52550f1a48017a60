"""A chain of `Split` pre-tokenizers run as compiled regex programs over UTF-8 bytes.

`pipeline.tokenizer.bytelevel.split_program` compiles each `Split`'s regex to a small program for
a backtracking matcher with Oniguruma's leftmost-first semantics (what `tokenizers` runs): the
alternatives of a `|` and the iterations of a greedy quantifier are tried in the engine's order,
the first path to reach MATCH is the match. Every character class of the regex (and each literal)
is one bit of a per-code-point table probed from the engine itself, so a class is exact by
construction; here a code point's bits are `class_bits[cp_class[cp]]`.

Instructions (rows of `ops`, int64 (n, 5): op, a, b, c and a SPLIT's guard; in the kernel, inside the
one array `pack_program` makes):

- CLASS a: one character with bit a;
- REPEAT a, b, c: b to c (-1: no limit) characters with bit a, greedy; backtracking gives them
  back one at a time (one stack entry for the whole run, as the engine's own run loop);
- SPLIT a, b: try pc a, then pc b, unless the next character has no bit of its guard (the
  characters a match from pc a can start with: then pc b at once, nothing to backtrack to); JMP a;
- NOT_AHEAD a / AHEAD a: the next character does not have / has bit a (the end of the text, which is
  the end of the piece being split, has no character);
- MATCH.

A chain applies each level's regex to every piece of the level before (a level's piece end is its
regex's text end); `program_word_end` gives the end of the last level's next piece and keeps each
level's current piece in `state` (int64 (levels + instructions, 3): per level its piece end and a match
found after a gap; the rows after them the matcher's backtracking stack, one row per instruction:
every jump goes forward, so a path runs an instruction at most once and pushes at most once for
it), so a long text is done window after window exactly as in one call.

A level whose program determinizes within bounds (`split_program`'s builder; every real chain's
levels do) runs as that automaton instead (`dfa_match`): a state is the ordered list of the
backtracking paths still alive, highest priority first, cut after the first that has matched (the
engine's leftmost-first order, as a Pike VM keeps it), so one pass over the characters, one table
load each, gives the end the backtracking finds, without re-reading a character or decoding it
twice. `table` int32, a row of 129 + classes entries a state, each state named by where its row
starts (so a step is a load, a shift and an add): at 0 whether a match ends at the text's end, at
1 + b the entry for ASCII byte b, at 129 + `cp_class[cp]` the entry for a larger code point, an entry
being (next state << 1) | (a match ends before that character), negative where every path dies.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import kernel
from pipeline.kernels.common.loads import load8
from pipeline.kernels.common.utf8 import decode_valid

PROGRAM = 2  # the encode kernel's `pattern` for a compiled chain (GPT2 and LLAMA3 are its written-out scanners)
CLASS, REPEAT, SPLIT, JMP, NOT_AHEAD, AHEAD, MATCH = 0, 1, 2, 3, 4, 5, 6
ANY = np.uint64(0xFFFFFFFFFFFFFFFF)  # a guard that lets every character through
ISOLATED, CONTIGUOUS, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT = 0, 1, 2, 3
"""How a level's matches become pieces (a level's behavior), as `Split`'s behaviors with `invert` folded
in: matches and gaps each a piece; runs of adjacent matches one piece; each match joined to the gap
before it; each match joined to the gap after it."""
LEVEL_WORDS = 6  # a level's row in `pack_program`'s array


@kernel(inline="always")
def _bits_at(text, i, cp_class, class_bits):
    """(class bits, bytes) of the character at byte i."""
    b = text[i]
    if b < 0x80:
        return class_bits[cp_class[b]], 1
    cp, width = decode_valid(text, i)
    return class_bits[cp_class[cp]], width


@kernel(inline="always")
def _has(bits, bit):
    return (bits >> bit) & 1 != 0


@kernel(_nrt=False)
def match_at(text, pos, end, ops, pc, cp_class, class_bits, stack, bottom):
    """End (byte) of the program's match at byte `pos` of text[:end] (the leftmost-first one, as the
    engine finds it), or -1 when none starts there. stack[bottom:] holds the backtracking entries
    (pc, pos, characters a REPEAT can still give back)."""
    top = bottom
    while True:
        op = ops[pc, 0]
        ok = False
        if op == CLASS:
            if pos < end:
                bits, width = _bits_at(text, pos, cp_class, class_bits)
                if _has(bits, ops[pc, 1]):
                    pos += width
                    pc += 1
                    ok = True
        elif op == REPEAT:
            bit, low, high = ops[pc, 1], ops[pc, 2], ops[pc, 3]
            count = 0
            p = pos
            while p < end and (high < 0 or count < high):
                bits, width = _bits_at(text, p, cp_class, class_bits)
                if not _has(bits, bit):
                    break
                p += width
                count += 1
            if count >= low:
                if count > low:
                    if top == stack.shape[0]:
                        raise RuntimeError("regex program: backtracking stack full")
                    stack[top, 0] = pc + 1
                    stack[top, 1] = p
                    stack[top, 2] = count - low
                    top += 1
                pos = p
                pc += 1
                ok = True
        elif op == SPLIT:
            guard = ops[pc, 4]
            if guard != -1 and (pos >= end or not _bits_at(text, pos, cp_class, class_bits)[0] & guard):
                pc = ops[pc, 2]  # the first branch cannot start here
                continue
            if top == stack.shape[0]:
                raise RuntimeError("regex program: backtracking stack full")
            stack[top, 0] = ops[pc, 2]
            stack[top, 1] = pos
            stack[top, 2] = 0
            top += 1
            pc = ops[pc, 1]
            ok = True
        elif op == JMP:
            pc = ops[pc, 1]
            ok = True
        elif op in (NOT_AHEAD, AHEAD):
            found = False
            if pos < end:
                found = _has(_bits_at(text, pos, cp_class, class_bits)[0], ops[pc, 1])
            if found == (op == AHEAD):
                pc += 1
                ok = True
        else:
            return pos
        if ok:
            continue
        if top == bottom:
            return -1
        top -= 1
        pc = stack[top, 0]
        pos = stack[top, 1]
        give = stack[top, 2]
        if give > 0:  # a greedy run gives back its last character
            pos -= 1
            while (text[pos] & 0xC0) == 0x80:
                pos -= 1
            if give > 1:
                stack[top, 1] = pos
                stack[top, 2] = give - 1
                top += 1


@kernel(inline="always")
def _dfa_entry(text, p, table, cp_class, s):
    """(the entry of state s for the character at byte p, its bytes)."""
    b = text[p]
    if b < 0x80:
        return table[s + 1 + b], 1
    cp, width = decode_valid(text, p)
    return table[s + 129 + cp_class[cp]], width


@kernel(inline="always")
def _dfa_run(text, p, end, table, cp_class, s, last):
    """End (byte) of the match the automaton finds going on from state s at byte p (`last`: where a
    match already ends, -1 where none)."""
    while p < end:
        entry, width = _dfa_entry(text, p, table, cp_class, s)
        if entry & 1:
            last = p
        s = entry >> 1
        if s < 0:
            return last
        p += width
    if table[s]:
        last = p
    return last


@kernel(inline="always")
def dfa_match(text, pos, end, table, cp_class, start):
    """End (byte) of the match at byte `pos` of text[:end] of the level whose automaton starts at
    `start` in `table` (what `match_at` finds, in one pass), or -1 when none starts there."""
    return _dfa_run(text, pos, end, table, cp_class, start, np.int64(-1))


@kernel(_nrt=False)
def find_match(text, start, end, ops, pc, first, cp_class, class_bits, state, bottom):
    """(start, end) of the first match at or after byte `start` in text[:end] (the engine's search),
    (-1, -1) when none; only characters with a bit of `first` can start one."""
    q = start
    while q < end:
        bits, width = _bits_at(text, q, cp_class, class_bits)
        if bits & first:
            e = match_at(text, q, end, ops, pc, cp_class, class_bits, state, bottom)
            if e > q:
                return q, e
        q += width
    return np.int64(-1), np.int64(-1)


@kernel(inline="always")
def find_dfa_match(text, start, end, table, cp_class, dfa_start, skip_above, skip_below):
    """`find_match` of a level run as its automaton: a character no match starts with costs one
    table load (its start entry is negative), and where the ASCII bytes a match starts with are
    those strictly between skip_above and skip_below (skip_above >= 0), eight ASCII bytes none of
    them is cost one word load (Bit Twiddling Hacks' `hasbetween`)."""
    ones = np.uint64(0x0101010101010101)
    high = np.uint64(0x8080808080808080)
    low7 = np.uint64(0x7F7F7F7F7F7F7F7F)
    below = ones * np.uint64(127 + skip_below)
    above = ones * np.uint64(127 - skip_above)
    q = start
    while q < end:
        if skip_above >= 0:
            while q + 8 <= end:
                word = load8(text, q)
                low = word & low7
                if word & high or (below - low) & ~word & (low + above) & high:
                    break
                q += 8
            if q >= end:
                break
        entry, width = _dfa_entry(text, q, table, cp_class, dfa_start)
        if entry >= 0:  # no match ends before the first character: the start state matches nothing empty
            e = _dfa_run(text, q + width, end, table, cp_class, entry >> 1, np.int64(-1))
            if e > q:
                return q, e
        q += width
    return np.int64(-1), np.int64(-1)


@kernel(_nrt=False)
def _backtracking_match(text, p, parent_end, level, code, cp_class, state):
    """`find_match` of a level without an automaton, its arrays cut out of `code`."""
    k, n, m = code[0], code[1], code[2]
    first_op = 3 + LEVEL_WORDS * k
    ops = code[first_op:first_op + 5 * n].reshape((n, 5))
    class_bits = code[first_op + 5 * n:first_op + 5 * n + m]
    row = 3 + LEVEL_WORDS * level
    return find_match(text, p, parent_end, ops, code[row], code[row + 5], cp_class, class_bits, state, k)


@kernel(inline="always")
def _level_match(text, p, parent_end, level, code, cp_class, table, state):
    """The first match of `level` at or after p (its automaton where it has one)."""
    row = 3 + LEVEL_WORDS * level
    dfa_start = code[row + 2]
    if dfa_start >= 0:
        return find_dfa_match(text, p, parent_end, table, cp_class, dfa_start, code[row + 3], code[row + 4])
    return _backtracking_match(text, p, parent_end, level, code, cp_class, state)


@kernel(inline="always")
def _piece_end(text, p, parent_end, level, code, cp_class, table, state):
    """End of the piece of `level` that starts at byte p of its parent piece (ending at parent_end)."""
    behavior = code[3 + LEVEL_WORDS * level + 1]
    if state[level, 1] == p:  # the match found after the gap that ended at p
        q, e = state[level, 1], state[level, 2]
    else:
        q, e = _level_match(text, p, parent_end, level, code, cp_class, table, state)
    state[level, 1] = -1
    if q < 0:
        return parent_end
    if behavior == MERGED_WITH_PREVIOUS:
        return e
    if q > p:  # a gap before the match: its own piece
        state[level, 1] = q
        state[level, 2] = e
        return q
    if behavior == ISOLATED:
        return e
    while e < parent_end:  # CONTIGUOUS: the adjacent matches; MERGED_WITH_NEXT: the gap after
        q2, e2 = _level_match(text, e, parent_end, level, code, cp_class, table, state)
        if q2 < 0:
            return e if behavior == CONTIGUOUS else parent_end
        if q2 > e and behavior == CONTIGUOUS:
            state[level, 1] = q2
            state[level, 2] = e2
            return e
        if behavior == MERGED_WITH_NEXT:
            state[level, 1] = q2
            state[level, 2] = e2
            return q2
        e = e2
    return e


@kernel(_nrt=False)
def program_word_end(text, position, size, program):
    """End (byte) of the chain's piece starting at byte `position` (where the last one ended).

    `program` is (code, cp_class, table, state): code `pack_program`'s, table the automata, state
    `new_state(program)` (the chain's progress, all -1 before a text's first piece).

    Compiled without numba's reference counting (`_nrt=False`, as every function of the chain's
    matcher a piece calls: none makes an array): with it, each call's array arguments are counted in
    and out, two atomic operations each, which was about 85% of a piece's time (150-250 ns). And
    four arrays, not eight: a call passes each array's whole descriptor (7-9 words), which for eight
    was another 10 ns a piece."""
    code, cp_class, table, state = program
    parent_end = size
    for level in range(code[0]):
        if position >= state[level, 0]:
            state[level, 0] = _piece_end(text, position, parent_end, level, code, cp_class, table, state)
        parent_end = state[level, 0]
    return parent_end


def pack_program(ops: np.ndarray, guards: np.ndarray, levels: np.ndarray, firsts: np.ndarray,
                 class_bits: np.ndarray) -> np.ndarray:
    """int64 (3 + 6k + 5n + m,): a chain's program in one array, as the kernel reads it: k, n, m; per
    level (start pc, behavior, automaton start or -1, the ASCII skip range of its search or (-1, -1),
    the bits a match can start with); per instruction (op, a, b, c, SPLIT's guard, -1 for ANY); the
    class bits (uint64 bit patterns as int64)."""
    k, n, m = levels.shape[0], ops.shape[0], class_bits.shape[0]
    as_int = [np.asarray(a, dtype=np.uint64).view(np.int64) for a in (guards, firsts, class_bits)]
    per_level = np.concatenate([np.asarray(levels, dtype=np.int64).reshape(k, 5), as_int[1].reshape(k, 1)], axis=1)
    per_op = np.concatenate([np.asarray(ops, dtype=np.int64).reshape(n, 4), as_int[0].reshape(n, 1)], axis=1)
    return np.concatenate([np.array([k, n, m], dtype=np.int64), per_level.reshape(-1), per_op.reshape(-1),
                           as_int[2]])


NO_PROGRAM = (pack_program(np.zeros((1, 4), dtype=np.int64), np.zeros(1, dtype=np.uint64),
                           np.zeros((0, 5), dtype=np.int64), np.zeros(0, dtype=np.uint64),
                           np.zeros(1, dtype=np.uint64)),
              np.zeros(1, dtype=np.uint16), np.zeros(130, dtype=np.int32))
"""(code, cp_class, table) of a tokenizer without a compiled chain (same types)."""


def new_state(program: tuple) -> np.ndarray:
    """The chain's progress before a text's first piece, and the matcher's stack: int64
    (levels + instructions, 3), all -1."""
    code = program[0]
    return np.full((int(code[0]) + int(code[1]), 3), -1, dtype=np.int64)


@kernel()
def _chain_ends(text, program):
    ends = np.empty(text.shape[0], dtype=np.int64)
    n = 0
    position = 0
    while position < text.shape[0]:
        position = program_word_end(text, position, text.shape[0], program)
        ends[n] = position
        n += 1
    return ends[:n]


def chain_ends(text: np.ndarray, program: tuple) -> np.ndarray:
    """int64 (pieces,): the byte end of each piece the chain `program` (code, cp_class, table) makes of
    valid UTF-8 `text` (uint8, 1-D)."""
    if text.dtype != np.uint8 or text.ndim != 1:
        raise TypeError(f"text must be 1-D uint8, got {text.dtype} with shape {text.shape}")
    program = tuple(program) + (new_state(program),)
    return _chain_ends(np.ascontiguousarray(text), program)
