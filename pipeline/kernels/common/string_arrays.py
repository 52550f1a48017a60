"""A list of strings (a vocabulary, a list of merges) as flat arrays, built by numpy in linear time:
what the table builders read instead of one Python object a token (at 250,000 tokens, a loop of
`str` methods a token costs tenths of a second; these arrays cost hundredths)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StringArrays:
    """Strings one after another, as UTF-8 and as code points.

    Attributes:
        utf8: uint8: every string's UTF-8 (lone surrogates as `surrogatepass` writes them).
        utf8_starts: int64, shape (n + 1,): string i is utf8[utf8_starts[i]:utf8_starts[i + 1]].
        code_points: uint32: every string's code points.
        char_starts: int64, shape (n + 1,): string i is code_points[char_starts[i]:char_starts[i + 1]].
    """

    utf8: np.ndarray
    utf8_starts: np.ndarray
    code_points: np.ndarray
    char_starts: np.ndarray

    @classmethod
    def of(cls, strings: list[str]) -> StringArrays:
        text = "".join(strings)
        code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        char_starts = np.zeros(len(strings) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), out=char_starts[1:])
        widths = 1 + (code_points >= 0x80).astype(np.int64) + (code_points >= 0x800) + (code_points >= 0x10000)
        byte_ends = np.zeros(code_points.shape[0] + 1, dtype=np.int64)
        np.cumsum(widths, out=byte_ends[1:])
        return cls(utf8=np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
                   utf8_starts=byte_ends[char_starts], code_points=code_points, char_starts=char_starts)

    def __len__(self) -> int:
        return self.char_starts.shape[0] - 1

    def char_lengths(self) -> np.ndarray:
        """int64 (n,): each string's length in code points."""
        return np.diff(self.char_starts)

    def none_in_range(self, bad: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """bool (len(starts),): whether code_points[starts[i]:stops[i]] holds no code point marked in
        `bad` (bool, one per code point): one cumulative sum, no loop a string."""
        counts = np.zeros(bad.shape[0] + 1, dtype=np.int64)
        np.cumsum(bad, out=counts[1:])
        return counts[stops] == counts[starts]

    def starting_with(self, prefix: str) -> np.ndarray:
        """bool (n,): whether string i starts with `prefix` (every string does when it is empty)."""
        head = np.frombuffer(prefix.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        starts = self.char_starts[:-1]
        result = self.char_lengths() >= head.shape[0]
        for k, point in enumerate(head):
            candidates = np.flatnonzero(result)
            result[candidates] = self.code_points[starts[candidates] + k] == point
        return result

    def ending_with(self, suffix: str) -> np.ndarray:
        """bool (n,): whether string i ends with `suffix` (every string does when it is empty)."""
        tail = np.frombuffer(suffix.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        stops = self.char_starts[1:]
        result = self.char_lengths() >= tail.shape[0]
        for k, point in enumerate(tail):
            candidates = np.flatnonzero(result)
            result[candidates] = self.code_points[stops[candidates] - tail.shape[0] + k] == point
        return result
