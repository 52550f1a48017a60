"""What a record format's reader is given (`RecordSource`: the unit reader is one) and what it fills
in on the first pass (`RecordScan`: the unit's scan). Typed structurally, so the formats know nothing
of work units or the reader."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

from pipeline.kernels.text.text_stream import RawTextStats

Skip = Callable[[str], None]  # called with the reason of each record that is not usable


class RecordSource(Protocol):
    """One unit, as a record reader reads it."""

    @property
    def unit(self) -> Any:
        """The work unit: its file, or its dataset's name, split, revision and row range (start, stop)."""

    @property
    def max_line_bytes(self) -> int:
        """The longest line read as a record (a longer one is skipped)."""

    def open_file(self) -> BinaryIO:
        """The unit's file, its bytes as stored (a format that reads its own compression)."""

    def decoded_lines(self, stats: RawTextStats, on_long_line: Callable[[int], None]) -> Iterator[str]:
        """The unit's text, decompressed and decoded, in pieces that end at line ends (a line past
        `max_line_bytes` is dropped with `on_long_line(its length)`); `stats` counts replaced bytes."""


class RecordScan(Protocol):
    """The first pass's account of a unit's records, which a reader may add to."""

    records_skipped: dict[str, int]
    replaced_bytes: int
    missing_field: str  # why no record had the text column (the fields found)
