"""One `json.loads` of a tokenizer.json a process, shared by everything that reads it.

A 250,000-token tokenizer.json is about 15 MB of JSON: one parse costs 0.3-0.4 CPU-seconds, and the
launcher and each worker read the same text in several places (the file's checks, the backend choice,
the cut rule, the family's encoder and tables), 4-5 parses a process before this. `parsed` keeps
the parses of the last few texts until `release_parses`: a parse of 250,000 tokens and 500,000
merges is about 170 MB of Python objects, so a load that is done lets them go (the fast encoder once
it is built, the job's launcher once its checks are done). The dict `parsed` returns is shared:
read it, never change it; code that changes a tokenizer's JSON parses a copy of its own
(`content.content_tokenizer_json`).

A `Tokenizer` built from a text is recorded with that text (`built_from`), so that what is derived
from a built tokenizer (its cut rule and special-id guard, `facts.py`) reads the text it came from
instead of `Tokenizer.to_str()`, which costs as much as a parse again (0.3 CPU-s for Qwen3.6's 15 MB).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import TypeVar

from tokenizers import Tokenizer

from pipeline.tokenizer.gc_pause import gc_paused

T = TypeVar("T")
_KEPT = 3  # the tokenizer.json, its content tokenizer's JSON, and one more (tests load many)
_PARSES: dict[str, dict] = {}
# Per live tokenizer object, the text it was built from: an entry goes with its tokenizer.
_SOURCES: weakref.WeakKeyDictionary[Tokenizer, str] = weakref.WeakKeyDictionary()


def parsed(tokenizer_json: str) -> dict:
    """`json.loads(tokenizer_json)`, parsed once a process while it stays among the last few texts:
    shared, read only. Raises what json.loads raises (ValueError, RecursionError)."""
    return kept(_PARSES, tokenizer_json, lambda: _loads(tokenizer_json), _KEPT)


def _loads(text: str) -> dict:
    with gc_paused():  # the collector took ~3/4 of a 256k vocabulary's parse (gc_pause.py)
        return json.loads(text)


def kept(cache: dict[str, T], key: str, make: Callable[[], T], most: int) -> T:
    """`cache[key]`, made by `make()` where it is missing; the oldest entry goes first once the cache
    holds `most` (a process's few tokenizers: their parses, a family's kernel tables)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= most:
            cache.pop(next(iter(cache)))
        found = cache[key] = make()
    return found


def remember(tokenizer_json: str, config: dict) -> str:
    """Keep `config` as the parse of `tokenizer_json` (its `json.dumps`, made by the caller), so that
    the next `parsed` of that text does not parse it; returns the text."""
    if len(_PARSES) >= _KEPT:
        _PARSES.pop(next(iter(_PARSES)))
    _PARSES[tokenizer_json] = config
    return tokenizer_json


def release_parses() -> None:
    """Let the kept parses go (the next `parsed` of a text parses it again)."""
    _PARSES.clear()


def built_from(tokenizer: Tokenizer, tokenizer_json: str) -> Tokenizer:
    """Record that `tokenizer` is `Tokenizer.from_str(tokenizer_json)` (and unchanged since, but for
    `encode_special_tokens`, truncation and padding, which its JSON's readers do not look at); returns it."""
    _SOURCES[tokenizer] = tokenizer_json
    return tokenizer


def recorded_json(tokenizer: Tokenizer) -> str | None:
    """The text `tokenizer` was built from where `built_from` recorded it, else None."""
    return _SOURCES.get(tokenizer)


def source_json(tokenizer: Tokenizer) -> str:
    """The text `tokenizer` was built from where `built_from` recorded it, else its `to_str()`."""
    found = _SOURCES.get(tokenizer)
    return tokenizer.to_str() if found is None else found


def parse_unkept(tokenizer_json: str) -> dict:
    """The kept parse of `tokenizer_json` where there is one (shared: read only), else a parse that
    is not kept: for a caller that derives what it needs once and lets the parse go."""
    found = _PARSES.get(tokenizer_json)
    return _loads(tokenizer_json) if found is None else found
