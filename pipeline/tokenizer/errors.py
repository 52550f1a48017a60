"""The tokenizer adapter's errors: one hierarchy for a tokenizer the job cannot use as given.

`TokenizerError` is the root (a file that is not a safe tokenizer.json, a missing special token);
`UnsupportedTokenizer` is the one error for "the fast path cannot reproduce this tokenizer exactly",
raised by the registry, `FastTokenizer` and every family's encoder alike, with the reasons.
`TokenizerPanic` is apart: the real tokenizer failed on a text, not the tokenizer on its own.
"""

from __future__ import annotations


class TokenizerError(ValueError):
    """The tokenizer cannot be loaded, is unsafe, or lacks a special token the job needs."""


class UnsupportedTokenizer(TokenizerError):
    """The fast path cannot reproduce a tokenizer exactly (`--tokenizer_backend fast`, or a family's
    encoder built for a tokenizer its family does not cover).

    Attributes:
        reasons: what of the tokenizer the fast path does not reproduce, one item each.
        family: the name of the family that claims the tokenizer (None: no family does).
        requested: whether `--tokenizer_backend fast` was asked for (the message then says what to use).
    """

    def __init__(self, reasons: list[str], family: str | None = None, requested: bool = False) -> None:
        self.reasons, self.family, self.requested = list(reasons), family, requested
        why = "; ".join(self.why)
        super().__init__("--tokenizer_backend fast cannot reproduce this tokenizer exactly: " + why
                         + " (use --tokenizer_backend auto or hf)" if requested else why)

    @property
    def why(self) -> list[str]:
        """The reasons, each naming the family that claims the tokenizer."""
        return family_reasons(self.family, self.reasons)

    def __reduce__(self):
        return UnsupportedTokenizer, (self.reasons, self.family, self.requested)


def family_reasons(family: str | None, reasons: list[str]) -> list[str]:
    """`reasons` prefixed with the family's name ("WordPiece family: ..."), as they are reported."""
    prefix = f"{family} family: " if family is not None else ""
    return [prefix + reason for reason in reasons]


class TokenizerPanic(RuntimeError):
    """The tokenizer's Rust code panicked (pyo3's PanicException, a BaseException that `except
    Exception` lets through with a Rust backtrace), e.g. Oniguruma's `retry-limit-in-match over` on a
    pattern that backtracks too much on one text; the message says what it said, and which tokenizer."""

    def __init__(self, said: str, tokenizer: str | None = None) -> None:
        self.said, self.tokenizer = said, tokenizer
        name = f"the tokenizer {tokenizer}" if tokenizer else "the tokenizer"
        super().__init__(f"{name} panicked: {said} (a regex of its backtracks past Oniguruma's limit on this "
                         f"text, or another failure inside `tokenizers`): remove or fix the input, or use "
                         f"another tokenizer")

    def __reduce__(self):
        return TokenizerPanic, (self.said, self.tokenizer)


def is_panic(error: BaseException) -> bool:
    """Whether `error` is pyo3's PanicException (its class is made at run time: known by name)."""
    return type(error).__name__ == "PanicException" and type(error).__module__ == "pyo3_runtime"


def panic_error(error: BaseException, tokenizer: str | None = None) -> TokenizerPanic:
    """The TokenizerPanic for a PanicException (or for one already converted), naming `tokenizer`."""
    if isinstance(error, TokenizerPanic):
        return TokenizerPanic(error.said, tokenizer)
    lines = str(error).splitlines()
    return TokenizerPanic(lines[0] if lines else "no message", tokenizer)
