"""Plain text: a book (or several, one after another) as one document, measured in one pass and
cleaned again in a second (the cleaning itself is `pipeline.kernels.text.text_stream`)."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.kernels.text.text_stream import RawTextStats, TextScan, scan_text

SIGNATURE_SEED = 0x4D696E48  # fixed: near-duplicate pairs do not depend on --seed
# A compressed text input's MinHash table is sized for this many times its size (its text's size is
# unknown until it has been read; the table's size only has to be the same in every run).
COMPRESSED_TEXT_RATIO = 4


def scan_text_input(pieces: Iterable[str], stats: RawTextStats, size: int, compressed: bool,
                    keep_boilerplate: bool, split_bytes: int = 0) -> TextScan:
    """The first pass over a text input of `size` bytes (see `scan_text`), with its MinHash
    signature sized from that size.

    Raises:
        NotText: as `clean_bytes` would for the whole input.
    """
    return scan_text(pieces, stats, keep_boilerplate,
                     signature_bytes=size * (COMPRESSED_TEXT_RATIO if compressed else 1),
                     signature_seed=SIGNATURE_SEED, split_bytes=split_bytes)
