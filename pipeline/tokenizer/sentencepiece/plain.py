"""The *plain chunk* form of a SentencePiece-style tokenizer: what its normalizer and pre-tokenizer
make of a chunk of plain characters, derived once from its configuration.

Most chunks of running text are a word with its punctuation, no space inside. When every
character of a chunk is plain (vouched for by the probe, and its output holds no space, no `▁`, no
character a Replace pattern needs, no whitespace a Strip or WhitespaceSplit would see), the whole
normalizer and pre-tokenizer reduce to "one word: a fixed prefix, then the mapped characters":
the tail operations cannot touch the chunk's text and act only on what is prepended.
`plain_form` follows the operations in their order on that prefix and refuses (plain path off,
prefix length -1) wherever an operation could see past it into the chunk or could split it. The
kernel then skips the per-code-point table and the tail passes for such chunks
(`pipeline.kernels.tokenizer.sentencepiece.encode`); any other chunk takes the general path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.kernels.tokenizer.sentencepiece.normalizer import (
    META,
    OP_COLLAPSE_SPACES,
    OP_MAP,
    OP_PREPEND,
    OP_REPLACE,
    OP_REPLACE_START,
    OP_STRIP,
    OP_TRIM_SPACES,
)

_RUST_WHITE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(chr(c) for c in range(0x2000, 0x200B)))
_OFF = (np.zeros(256, dtype=np.uint8), np.array([-1], dtype=np.int64), np.zeros(0x10000, dtype=np.uint8))


def plain_form(ops: list[tuple[int, str, str]], metaspace_prepends: bool | None, split: bool, whitespace_split: bool,
               mapped: Callable[[str], str | None], bmp: int = 0x10000,
               isolated: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(plain_map uint8 (256,), plain_prefix int64: [prefix length or -1, prefix bytes...], plain_cp
    uint8 (bmp,)).

    Args:
        ops: the normalizer's operations in order (opcode, pattern, content), OP_MAP among them.
        metaspace_prepends: None without a Metaspace pre-tokenizer, else whether it prepends `▁`.
        split: Metaspace's split option.
        whitespace_split: WhitespaceSplit before Metaspace.
        mapped: the per-character normalizers' output for one character, None where the table
            does not vouch for it.
        bmp: code points covered by the table.
        isolated: the characters an isolated Split makes words of their own (never plain: a chunk
            holding one is more than one word).

    Returns:
        plain_map[b] is the byte ASCII byte b normalises to (0: not plain); plain_cp[cp] is 1 where
        a code point is plain (its bytes are the table's output); the prefix is what precedes the
        mapped text in the chunk's one word (length -1: no plain path). A character is plain when
        its output is not empty and holds no space, no `▁`, no character of a Replace pattern, and
        no whitespace where a Strip or WhitespaceSplit would see it."""
    plain_map, plain_cp, outputs = _plain_characters(ops, whitespace_split, mapped, bmp, set(isolated))
    if not outputs:
        return _OFF
    # the chunk holds no whitespace: WhitespaceSplit leaves it whole, only the prefix is in question
    prefix = _plain_prefix(ops, metaspace_prepends, split, mapped, outputs)
    if prefix is None or any(char in prefix for char in isolated):
        return _OFF
    data = prefix.encode("utf-8")
    return plain_map, np.array([len(data), *data], dtype=np.int64), plain_cp


def _plain_characters(ops: list[tuple[int, str, str]], whitespace_split: bool, mapped: Callable[[str], str | None],
                      bmp: int, isolated: set[str]) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """(plain_map, plain_cp, every character a plain character's output holds)."""
    banned = {" ", META} | isolated
    if whitespace_split or any(code == OP_STRIP for code, _, _ in ops):
        banned |= _RUST_WHITE
    for code, pattern, _ in ops:
        if code in (OP_REPLACE, OP_REPLACE_START):
            banned |= set(pattern)
    plain_map = np.zeros(256, dtype=np.uint8)
    plain_cp = np.zeros(bmp, dtype=np.uint8)
    outputs: set[str] = set()
    for cp in range(bmp):
        if 0xD800 <= cp < 0xE000:
            continue
        out = mapped(chr(cp))
        if not out or any(char in banned for char in out):
            continue
        if cp < 0x80:
            if len(out) != 1 or ord(out) >= 0x80:
                continue
            plain_map[cp] = ord(out)
        plain_cp[cp] = 1
        outputs.update(out)
    return plain_map, plain_cp, outputs


def _plain_prefix(ops: list[tuple[int, str, str]], metaspace_prepends: bool | None, split: bool,
                  mapped: Callable[[str], str | None], outputs: set[str]) -> str | None:
    """What precedes the mapped text in a plain chunk's one word, the operations followed in order on
    it; None where an operation could see past it into the chunk, or the word would split."""
    prefix = ""
    for code, pattern, content in ops:
        if code == OP_MAP:
            parts = [mapped(char) for char in prefix]
            if any(part is None for part in parts):
                return None
            prefix = "".join(parts)
        elif code in (OP_COLLAPSE_SPACES, OP_TRIM_SPACES):
            if " " in prefix:
                return None
        elif code == OP_STRIP:
            if any(char in _RUST_WHITE for char in prefix):
                return None
        elif code == OP_REPLACE:
            if _may_match(pattern, set(prefix) | outputs):
                return None
        elif code == OP_PREPEND:
            prefix = content + prefix  # the chunk is never empty
        elif code == OP_REPLACE_START:
            if prefix.startswith(pattern):
                prefix = content + prefix[len(pattern):]
            elif pattern.startswith(prefix) and _may_match(pattern[len(prefix):], outputs):
                return None  # the pattern may run on into the chunk
        else:
            return None
    if metaspace_prepends is not None:
        if any(char in _RUST_WHITE for char in prefix):
            return None  # WhitespaceSplit would cut it off, Metaspace would turn a space into `▁`
        if metaspace_prepends and not prefix.startswith(META):
            prefix = META + prefix
        if split and META in prefix[1:]:
            return None  # the word would split inside the prefix
    return prefix


def _may_match(pattern: str, alphabet: set[str]) -> bool:
    """Whether `pattern` can occur in a text made only of `alphabet`'s characters."""
    return bool(pattern) and all(char in alphabet for char in pattern)


def whitespace_cuts(ops: list[tuple[int, str, str]], cut_drop: bool, metaspace_prepends: bool | None, split: bool,
                    mapped: Callable[[str], str | None], bmp: int) -> tuple[np.ndarray, np.ndarray]:
    """Where the kernel may cut a text inside, beyond the document's safe cuts: at a run of ASCII
    whitespace that the normalizer maps to spaces, between two characters that keep the run apart.

    For a tokenizer whose normalizer is the per-character table first and then only collapses
    runs of spaces (into `" "` or `"▁"`), followed by a splitting, prepending Metaspace (with or
    without WhitespaceSplit), the run becomes one word start: the text after it begins a word
    exactly as a text of its own does (its prepended `▁`), and the text before it ends a word. That
    holds when the character before the run maps to text that ends in no whitespace (so the
    collapse cannot reach past the run) and the character after it maps to text that starts with
    neither whitespace nor `▁` (which would stop the prepend). Both neighbours are vouched for by
    the probe (they act alone, so no normalizer context crosses the run).

    Returns:
        (run_bytes uint8 (256,): 1 for the ASCII whitespace bytes that map to one space; edges
        uint8 (bmp,): bit 0 where a code point may end the text before a run, bit 1 where it may
        start the text after one). All zero where the tokenizer is not of that form."""
    run_bytes = np.zeros(256, dtype=np.uint8)
    edges = np.zeros(bmp, dtype=np.uint8)
    collapse_only = all(code == OP_COLLAPSE_SPACES and content in (" ", META) for code, _, content in ops[1:])
    if not (cut_drop and metaspace_prepends and split and ops and ops[0][0] == OP_MAP and collapse_only):
        return run_bytes, edges
    for byte in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20):
        if mapped(chr(byte)) == " ":
            run_bytes[byte] = 1
    if not run_bytes[0x20]:
        return np.zeros(256, dtype=np.uint8), edges
    for cp in range(bmp):
        if 0xD800 <= cp < 0xE000:
            continue
        out = mapped(chr(cp))
        if not out:
            continue
        if out[-1] not in _RUST_WHITE:
            edges[cp] |= 1
        if out[0] not in _RUST_WHITE and out[0] != META:
            edges[cp] |= 2
    return run_bytes, edges
