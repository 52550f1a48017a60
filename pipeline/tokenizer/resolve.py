"""Find a tokenizer the user named: a `tokenizer.json`, a folder holding one, or a Hub id (downloaded
through the Hugging Face cache). Returns the JSON with truncation and padding switched off.

`resolve_spec` is the job launcher's: the resolved JSON and its checked `TokenizerSpec` (with its
fingerprint) are kept on disk (`table_cache`) under the sha256 of the file's bytes and of the code
that checks and derives them (every module of `pipeline.tokenizer`, and the `tokenizers` version),
so a job on a tokenizer an earlier job used reads them back instead of checking and building it
again: 0.13 CPU-s for bert-base-uncased, 4.6 for Qwen3.6's 15 MB. A changed file, or changed code,
is another key; a failed check is never kept. The cache folder is trusted as numba's is (its arrays
are read without pickle; whoever can write there can change what a job computes).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer

from pipeline.console.preflight import looks_like_path, missing_tokenizer
from pipeline.tokenizer.errors import TokenizerError
from pipeline.tokenizer.spec import MAX_TOKENIZER_BYTES, TokenizerSpec, check_tokenizer_json
from pipeline.tokenizer.table_cache import cached_arrays
from schemas.manifest import TOKENIZER_FILE

__all__ = ["looks_like_path", "resolve_spec", "resolve_tokenizer_json"]


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
    return _resolved(name_or_path, _raw_of(name_or_path))


def _raw_of(name_or_path: str) -> str:
    """The text of the tokenizer.json `name_or_path` names (unchecked)."""
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
    return raw


def _resolved(name_or_path: str, raw: str) -> str:
    """`raw` checked, built and serialised with truncation and padding off."""
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


_SPEC_ARRAYS = ("json", "fields", "special_ids", "unused_ids", "continuation_ids", "fingerprint")
_FIELDS = ("cls_id", "sep_id", "pad_id", "mask_id", "vocab_size", "unk_id")


@lru_cache(maxsize=1)
def _code_key() -> str:
    """sha256 of every module of pipeline.tokenizer and the `tokenizers` version: what the checks
    and the spec's facts are made by."""
    digest = hashlib.sha256(tokenizers.__version__.encode())
    for path in sorted(Path(__file__).resolve().parent.rglob("*.py")):
        digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def resolve_spec(name_or_path: str) -> TokenizerSpec:
    """`TokenizerSpec.from_json(resolve_tokenizer_json(name_or_path))`, its fingerprint made, read
    back from the cache where an earlier process made it from the same bytes with the same code.

    Raises:
        TokenizerError: as resolve_tokenizer_json and TokenizerSpec.from_json (never cached)."""
    raw = _raw_of(name_or_path)
    key = f"{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()} {_code_key()}"
    return _spec_of(cached_arrays("tokenizer-spec", key, _SPEC_ARRAYS, lambda: _spec_arrays(name_or_path, raw)))


def _spec_arrays(name_or_path: str, raw: str) -> dict[str, np.ndarray]:
    spec = TokenizerSpec.from_json(_resolved(name_or_path, raw))
    return {"json": np.frombuffer(spec.json.encode("utf-8"), dtype=np.uint8),
            "fields": np.array([getattr(spec, name) for name in _FIELDS], dtype=np.int64),
            "special_ids": np.array(spec.special_ids, dtype=np.int64),
            "unused_ids": np.array(spec.unused_ids, dtype=np.int64),
            "continuation_ids": np.array(spec.continuation_ids, dtype=np.int64),
            "fingerprint": np.frombuffer(spec.fingerprint.encode("ascii"), dtype=np.uint8)}


def _spec_of(arrays: dict[str, np.ndarray]) -> TokenizerSpec:
    fields = dict(zip(_FIELDS, (int(v) for v in arrays["fields"]), strict=True))
    spec = TokenizerSpec(json=arrays["json"].tobytes().decode("utf-8"), **fields,
                         special_ids=tuple(int(i) for i in arrays["special_ids"]),
                         unused_ids=tuple(int(i) for i in arrays["unused_ids"]),
                         continuation_ids=tuple(int(i) for i in arrays["continuation_ids"]))
    spec.__dict__["fingerprint"] = arrays["fingerprint"].tobytes().decode("ascii")  # its cached_property
    return spec
