"""The error every fast tokenizer family raises for what it cannot reproduce exactly."""

from __future__ import annotations


class UnsupportedTokenizer(ValueError):
    """`--tokenizer_backend fast` on a tokenizer the fast path cannot reproduce exactly."""


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
