"""The *stream form* of a Llama-style BPE tokenizer: when its whole normalised text is one BPE word
made of per-character outputs, and where that word may be cut (see
`pipeline.kernels.tokenizer.sentencepiece.bpe_stream`).

A tokenizer is of that form when it has no pre-tokenizer, no per-character normalizer, and its
normalizer is only `Prepend` and `Replace` of one character by a non-empty string (Llama-2 and
Mistral: `Prepend("▁")`, `Replace(" ", "▁")`; Gemma: the Replace alone), and its BPE has byte
fallback with all 256 `<0xNN>` pieces, none of which any merge takes, and no ignore_merges: then
every character is a piece or byte pieces (nothing unknown is ever pending), and a merge can only
cross between two output characters u, v that are both pieces and that some piece holds as `uv`.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.utf8 import BMP
from pipeline.kernels.tokenizer.sentencepiece.bpe import BpeTables
from pipeline.kernels.tokenizer.sentencepiece.bpe_stream import (
    CUT_AFTER,
    CUT_BEFORE,
    CUT_BEFORE_SPACE,
    DIRECT_BYTES,
    StreamTables,
)
from pipeline.kernels.tokenizer.sentencepiece.normalizer import OP_MAP, OP_PREPEND, OP_REPLACE


def stream_form(ops: list[tuple[int, str, str]], has_per_character: bool, has_pre_tokenizer: bool, model: dict,
                vocab: dict[str, int], tables: BpeTables) -> StreamTables | None:
    """The stream kernel's tables (classes, direct ids, f_start, f_len, f_blob, prefix, growth), or
    None where the tokenizer is not of the stream form.

    Args:
        ops: the normalizer's operations in order (opcode, pattern, content), OP_MAP among them.
        has_per_character: whether any per-character normalizer (NFKC, Precompiled, ...) is set.
        has_pre_tokenizer: whether a pre-tokenizer is set.
        model: the model's configuration as the Rust model holds it.
        vocab: piece -> id.
        tables: the BPE tables built from the model."""
    if has_per_character or has_pre_tokenizer or model.get("type") != "BPE" or model.get("ignore_merges"):
        return None
    if not tables.byte_fallback or not tables.bytes_isolated or (tables.byte_ids < 0).any():
        return None
    rest = [op for op in ops if op[0] != OP_MAP]
    if len(rest) != len(ops) - 1 or ops[0][0] != OP_MAP:
        return None
    for code, pattern, content in rest:
        if code == OP_REPLACE and not (len(pattern) == 1 and ord(pattern) < BMP and content):
            return None
        if code not in (OP_REPLACE, OP_PREPEND):
            return None
    prefix = ""
    for code, pattern, content in rest:
        prefix = content + prefix if code == OP_PREPEND else prefix.replace(pattern, content)

    def out(char: str) -> str:
        for code, pattern, content in rest:
            if code == OP_REPLACE:
                char = char.replace(pattern, content)
        return char

    classes, direct, f_start, f_len, blob, growth = _per_code_point(out, vocab)
    head = np.frombuffer(prefix.encode("utf-8"), dtype=np.uint8).copy()
    return StreamTables(classes, direct, f_start, f_len, blob, head, np.array([growth], dtype=np.int64))


def _per_code_point(out, vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                          int]:
    """(classes, direct ids, f_start, f_len, f_blob, growth) over the BMP: where a merge cannot cross
    before or after each code point's output `out(char)`, its id where that output is one piece, and
    the output's UTF-8; growth is the most output bytes per input byte."""
    pairs = {(a, b) for token in vocab for a, b in zip(token, token[1:])}
    firsts = {a for a, _ in pairs}
    seconds = {b for _, b in pairs}
    space = out(" ")[0]
    classes = np.zeros(BMP, dtype=np.uint8)
    direct = np.full(BMP, -1, dtype=np.int32)
    f_start = np.zeros(BMP, dtype=np.int32)
    f_len = np.zeros(BMP, dtype=np.int32)
    parts: list[bytes] = []
    total, growth = 0, 1
    for cp in range(BMP):
        if 0xD800 <= cp < 0xE000:
            continue
        char = chr(cp)
        mapped = out(char)
        data = mapped.encode("utf-8")
        f_start[cp], f_len[cp] = total, len(data)
        parts.append(data)
        total += len(data)
        growth = max(growth, -(-len(data) // len(char.encode("utf-8"))))
        first, last = mapped[0], mapped[-1]
        if first not in vocab or first not in seconds:
            classes[cp] |= CUT_BEFORE
        if last not in vocab or last not in firsts:
            classes[cp] |= CUT_AFTER
        if last not in vocab or space not in vocab or (last, space) not in pairs:
            classes[cp] |= CUT_BEFORE_SPACE
        if len(mapped) == 1:
            direct[cp] = vocab.get(mapped, DIRECT_BYTES)
    blob = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
    return classes, direct, f_start, f_len, blob, growth
