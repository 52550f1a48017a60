"""The kernels' one UTF-8 decoder against Python's codec, on valid text and on invalid bytes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.common.utf8 import BMP, decode, decode_bmp, decode_lenient, decode_valid, utf8_width


def reference(data: bytes, i: int) -> tuple[int, int]:
    """(code point, bytes) of the one character Python's strict codec reads at data[i], or (-1, 1)."""
    for size in range(1, 5):
        if i + size > len(data):
            break
        try:
            text = data[i:i + size].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) == 1:
            return ord(text), size
    return -1, 1


def lenient_reference(data: bytes, i: int) -> tuple[int, int]:
    """The lenient rule as written in `decode_lenient`'s contract, in plain Python."""
    b0, left = data[i], len(data) - i
    if b0 < 0x80:
        return b0, 1
    for size, lead, bits in ((4, 0xF0, 0x07), (3, 0xE0, 0x0F), (2, 0xC0, 0x1F)):
        if b0 >= lead and left >= size:
            cp = b0 & bits
            for k in range(1, size):
                cp = (cp << 6) | (data[i + k] & 0x3F)
            return cp, size
    return -1, 1


# Invalid and edge sequences: stray continuation, C0/C1 leads, overlongs, surrogates (surrogatepass),
# beyond U+10FFFF, F5..FF leads, truncated sequences, the largest of each width.
EDGES = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xdf\xbf", b"\xe0\x80\x80", b"\xe0\xa0\x80",
         b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xee\x80\x80", b"\xef\xbf\xbf", b"\xf0\x80\x80\x80",
         b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
         b"\xf8\x88\x80\x80\x80", b"\xff", b"\xe2\x82", b"\xe2", b"\xf0\x9f\x98", b"\xc3", b"\xc3a", b"\xe2\x28\xa1"]

pieces = st.one_of(
    st.binary(max_size=4),
    st.text(max_size=3).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from(EDGES),
)
byte_strings = st.lists(pieces, max_size=8).map(b"".join)


def _walk(function, data: bytes, bounded: bool = True) -> list[tuple[int, int]]:
    """The decoder's answer at every byte position of data."""
    array = np.frombuffer(data, dtype=np.uint8)
    return [tuple(int(v) for v in (function(array, i, len(data)) if bounded else function(array, i)))
            for i in range(len(data))]


def test_edge_sequences_decode_as_pythons_codec_reads_them():
    for edge in EDGES:
        for data in (edge, edge + b"a", b"a" + edge):
            assert _walk(decode, data) == [reference(data, i) for i in range(len(data))], data
            assert _walk(decode_lenient, data) == [lenient_reference(data, i) for i in range(len(data))], data


def test_the_checked_decoder_never_reads_past_its_bound():
    data = b"\xe2\x82\xac\xf0\x9f\x98\x80"  # euro sign, then an emoji
    array = np.frombuffer(data, dtype=np.uint8)
    assert tuple(decode(array, 0, 3)) == (0x20AC, 3)
    assert tuple(decode(array, 0, 2)) == (-1, 1)  # the bound cuts it: truncated
    assert tuple(decode(array, 3, 6)) == (-1, 1)
    assert tuple(decode(array, 3, 7)) == (0x1F600, 4)


@settings(max_examples=300, deadline=None)
@given(byte_strings)
def test_decode_is_pythons_strict_codec_at_every_position(data):
    assert _walk(decode, data) == [reference(data, i) for i in range(len(data))]


@settings(max_examples=200, deadline=None)
@given(byte_strings)
def test_decode_bmp_also_refuses_what_lies_beyond_the_bmp(data):
    expected = [(cp, size) if cp < BMP else (-1, 1) for cp, size in (reference(data, i) for i in range(len(data)))]
    assert _walk(decode_bmp, data) == expected


@settings(max_examples=200, deadline=None)
@given(byte_strings)
def test_decode_lenient_follows_its_rule_on_any_bytes(data):
    assert _walk(decode_lenient, data) == [lenient_reference(data, i) for i in range(len(data))]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_every_decoder_reads_valid_text_as_its_characters(text):
    data = text.encode("utf-8")
    array = np.frombuffer(data, dtype=np.uint8)
    for function, bounded in ((decode, True), (decode_valid, False), (decode_lenient, True)):
        chars, i = [], 0
        while i < len(data):
            cp, size = function(array, i, len(data)) if bounded else function(array, i)
            assert size == utf8_width(data[i])
            chars.append(chr(cp))
            i += size
        assert "".join(chars) == text, function
