import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kernels.text.cleaning import (
    _CONTROL_BYTES,
    SKIP_BINARY_NUL,
    SKIP_BINARY_UNDECODABLE,
    SKIP_EMPTY,
    SKIP_HTML,
    SKIP_SURROGATE,
    NotText,
    clean_bytes,
    clean_text,
    decode,
    has_lone_surrogate,
    normalize_newline_bytes,
    strip_gutenberg,
)
from tests.conftest import HTML_PAGES, excerpt


def test_real_gutenberg_book_is_cleaned():
    raw = excerpt("drama__hamlet.txt").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw
    cleaned = clean_bytes(raw)
    assert "\r" not in cleaned.text and not cleaned.text.startswith("\ufeff")
    assert "Project Gutenberg" not in cleaned.text[:500]
    assert "*** END OF" not in cleaned.text and "*** START OF" not in cleaned.text
    assert "Hamlet" in cleaned.text and cleaned.boilerplate_chars_removed > 10_000
    kept = clean_bytes(raw, keep_boilerplate=True)
    assert kept.text.startswith("The Project Gutenberg eBook") and kept.boilerplate_chars_removed == 0


@pytest.mark.parametrize("name", HTML_PAGES)
def test_html_pages_are_not_text(name):
    with pytest.raises(NotText, match=re.escape(SKIP_HTML)):
        clean_bytes(excerpt(name).read_bytes())


def test_newlines_bom_and_markers():
    raw = b"\xef\xbb\xbfheader\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\nbody\rline\r\n*** END OF X ***\r\nlicence"
    assert clean_bytes(raw).text == "\nbody\nline\n"


def test_invalid_utf8_is_replaced_and_counted():
    text, replaced = decode("caf\u00e9 ok ".encode() + b"\xff\xfe" + b" end")
    assert replaced == 2 and text.count("\ufffd") == 2 and text.startswith("caf\u00e9")
    assert clean_bytes(b"fine text " * 50 + b"\xff").replaced_bytes == 1


def test_binary_and_empty_are_skipped_with_reasons():
    with pytest.raises(NotText, match=SKIP_EMPTY):
        clean_bytes(b"")
    with pytest.raises(NotText, match=SKIP_EMPTY):
        clean_bytes(b" \r\n\t \n")
    with pytest.raises(NotText, match=re.escape(SKIP_BINARY_NUL)):
        clean_bytes(b"abc\x00def")
    with pytest.raises(NotText, match="not UTF-8"):
        clean_bytes(bytes(range(128, 256)) * 10)
    assert SKIP_BINARY_UNDECODABLE.startswith("not text")


def test_utf16_with_bom_is_decoded():
    raw = "\ufeffHello, world.\r\nSecond line.".encode("utf-16-le")
    assert clean_bytes(b"\xff\xfe" + raw[2:]).text == "Hello, world.\nSecond line."


def _gutenberg_book(title: str, body: str) -> str:
    return (f"The Project Gutenberg eBook of {title}\nheader text\n"
            f"*** START OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\n{body}\n"
            f"*** END OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\nlicence text " * 1)


def test_every_book_of_a_concatenated_file_is_kept():
    bodies = [f"Body of book {i}. " * 50 for i in range(6)]
    text = "".join(_gutenberg_book(f"book {i}", body) for i, body in enumerate(bodies))
    kept, removed = strip_gutenberg(text)
    for body in bodies:
        assert body in kept
    assert "licence text" not in kept and "header text" not in kept
    assert removed == len(text) - sum(len(b) + 2 for b in bodies)


def test_an_end_marker_without_a_start_marker_cuts_nothing():
    text = "A story.\n*** END OF the first part ***\nThe second part, which must stay.\n"
    assert strip_gutenberg(text) == (text, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"\n\r", b"\x00", b"\x07", b"\x0b", b"\x0c", b"\x1f", b"\x7f",
                                 b"\t", b" ", b"word", b"eight by", "\u00e9\u65e5".encode(), b"\xff", b"\x80"]),
                max_size=60).map(b"".join))
def test_newline_bytes_are_normalized_as_replace_and_translate_do(data):
    """The one-pass kernel equals the two replaces and the translate it stands for, whatever the
    bytes around its 8-byte steps."""
    expected = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    assert normalize_newline_bytes(data) == (expected, len(expected) - len(expected.translate(None, _CONTROL_BYTES)))


# The reference the encoder-based check replaced: a regex over the surrogate block.
_SURROGATE_REFERENCE = re.compile("[\ud800-\udfff]")
# Every width CPython stores a str in (1, 2 and 4 bytes a code point), with surrogates often drawn.
_SURROGATE_TEXT = st.lists(st.one_of(
    st.characters(max_codepoint=0xFF), st.characters(min_codepoint=0x100, max_codepoint=0xFFFF),
    st.characters(min_codepoint=0x10000), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud7ff", "\ue000", "\U0001f600"]),
), max_size=40).map("".join)


@settings(max_examples=100, deadline=None)
@given(_SURROGATE_TEXT)
def test_lone_surrogates_are_found_as_the_regex_finds_them(text):
    assert has_lone_surrogate(text) == (_SURROGATE_REFERENCE.search(text) is not None)


@pytest.mark.parametrize("text", ["ascii only", "caf\u00e9 \u4e2d\u6587 \U0001f600", "edge \ud7ff\ue000\U0010ffff",
                                  "lone \ud800", "lone \udfff at the end", "\udc80 first", "pair as two \ud83d\ude00"])
def test_clean_text_refuses_exactly_the_texts_with_a_surrogate(text):
    if _SURROGATE_REFERENCE.search(text):
        with pytest.raises(NotText, match=re.escape(SKIP_SURROGATE)):
            clean_text(text)
    else:
        assert clean_text(text).text == text
