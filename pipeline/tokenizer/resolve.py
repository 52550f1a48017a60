"""Find a tokenizer the user named: a `tokenizer.json`, a folder holding one, or a Hub id (downloaded
through the Hugging Face cache). Returns the JSON with truncation and padding switched off."""

from __future__ import annotations

import os

from tokenizers import Tokenizer

from pipeline.console.preflight import looks_like_path, missing_tokenizer
from pipeline.tokenizer.errors import TokenizerError
from pipeline.tokenizer.spec import MAX_TOKENIZER_BYTES, check_tokenizer_json
from schemas.manifest import TOKENIZER_FILE

__all__ = ["looks_like_path", "resolve_tokenizer_json"]


def _read(path: str) -> str:
    size = os.path.getsize(path)
    if size > MAX_TOKENIZER_BYTES:
        raise TokenizerError(f"{path!r}: {size:,} bytes, over the {MAX_TOKENIZER_BYTES:,} a tokenizer file may hold")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError as error:
        raise TokenizerError(f"{path!r}: not a tokenizer.json: not UTF-8 text ({error.reason})") from None


def resolve_tokenizer_json(name_or_path: str) -> str:
    """Read a `tokenizer.json` from a file, a folder holding one, or the Hub (through the HF cache).
    Only that one file is read (never a tokenizer_config.json, code or another file of the folder),
    and it is checked (spec.check_tokenizer_json) before `tokenizers` builds or serialises it.

    Raises:
        TokenizerError: naming the path or Hub id that could not be read.
    """
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, TOKENIZER_FILE)
        if not os.path.isfile(path):
            raise TokenizerError(f"tokenizer folder {name_or_path!r} has no {TOKENIZER_FILE}")
        name_or_path = path
    if os.path.isfile(name_or_path):
        raw = _read(name_or_path)
    elif looks_like_path(name_or_path):
        raise TokenizerError(missing_tokenizer(name_or_path) or f"tokenizer path {name_or_path!r} is not a file")
    else:
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(repo_id=name_or_path, filename=TOKENIZER_FILE)
        except Exception as error:  # the hub client raises many types; all mean "cannot load"
            raise TokenizerError(
                f"cannot load tokenizer {name_or_path!r}: not a local file or folder, and the Hub "
                f"download failed ({type(error).__name__}: {error})"
            ) from error
        raw = _read(path)
    try:
        check_tokenizer_json(raw)
    except TokenizerError as error:
        raise TokenizerError(f"{name_or_path!r}: {error}") from None
    try:
        tokenizer = Tokenizer.from_str(raw)
    except Exception as error:  # tokenizers raises a bare Exception on malformed JSON
        raise TokenizerError(f"{name_or_path!r} is not a valid tokenizer.json: {error}") from error
    # Our chunking decides lengths: whatever truncation or padding the file configures is off.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer.to_str()
