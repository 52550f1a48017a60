"""The manifest and its INPUTS_FILE as they are published: input paths relative to the input root
they were found under, the output folder and local tokenizer paths reduced to their names, so no
local path, bucket name or user name leaves the machine. Everything that describes the data
(counts, checksums, config values) is unchanged."""

from __future__ import annotations

import copy
import functools
import glob as globlib
import os
import posixpath
from collections.abc import Callable

from pipeline.tokenizer.resolve import looks_like_path
from schemas import manifest as m
from schemas.manifest import TOKENIZER_FILE

_HF_SCHEME = "hf://"


def _root_of(pattern: str) -> str:
    """The folder a pattern's files are found under: the pattern itself for a folder, the part
    before the first wildcard for a glob, the parent folder for a single file."""
    pattern = pattern.rstrip("/")
    if globlib.has_magic(pattern):
        head = pattern[: min(pattern.index(c) for c in "*?[" if c in pattern)]
        return head.rsplit("/", 1)[0] if "/" in head else ""
    if os.path.isdir(pattern) or not posixpath.splitext(pattern)[1]:
        return pattern
    return posixpath.dirname(pattern)


def _name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) or path


def relative_to_roots(path: str, roots: list[str]) -> str:
    """`path` relative to the longest root it lies under; its file name when it lies under none."""
    for root in sorted((r for r in roots if r), key=len, reverse=True):
        if path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1:]
    return _name(path)


def _public_pattern(pattern: str) -> str:
    """An input pattern from its root folder's name on: `/home/me/books/*.txt` -> `books/*.txt`."""
    parent = posixpath.dirname(_root_of(pattern).rstrip("/"))
    return pattern[len(parent) + 1:] if parent and pattern.startswith(parent + "/") else pattern


def public_name(name_or_path: str) -> str:
    """A Hub id as the user gave it; a local path reduced to its file name."""
    if not name_or_path or (not looks_like_path(name_or_path) and not os.path.exists(name_or_path)
                            and "://" not in name_or_path):
        return name_or_path
    return _name(name_or_path)


# The embedded sample tokenizer (pipeline/sample/tokenizer) is a copy of this Hub tokenizer.
EMBEDDED_TOKENIZER_ORIGIN = "bert-base-uncased"


@functools.cache
def _embedded_fingerprint() -> str:
    from pipeline.sample import SAMPLE_TOKENIZER
    from pipeline.tokenizer.resolve import resolve_tokenizer_json
    from pipeline.tokenizer.spec import TokenizerSpec

    return TokenizerSpec.from_json(resolve_tokenizer_json(str(SAMPLE_TOKENIZER))).fingerprint


def tokenizer_origin(name_or_path: str, sha256: str) -> str:
    """The tokenizer by where it comes from: a Hub id as given; `bert-base-uncased` for the embedded
    copy (or any file identical to it); else the name of the local folder (not `tokenizer.json`)."""
    if sha256 == _embedded_fingerprint():
        return EMBEDDED_TOKENIZER_ORIGIN
    name = public_name(name_or_path)
    if name == TOKENIZER_FILE and name != name_or_path:
        return public_name(posixpath.dirname(name_or_path.rstrip("/"))) or name
    return name


def public_entry_function(manifest: dict) -> Callable[[str, dict], dict]:
    """What makes one per-input entry (section, entry) of `manifest` (the output's own, not yet made
    public) public: its paths relative to the input roots, its skip reason without local paths."""
    config = manifest[m.KEY_CONFIG]
    roots = [_root_of(p) for p in config.get("inputs", [])]
    hf_name = config.get("hf_dataset") or ""
    local_hf = bool(hf_name) and public_name(hf_name) != hf_name
    tokenizer = config.get("tokenizer", "")

    def rel(path: str | None) -> str | None:
        if path is None:
            return None
        if path.startswith(_HF_SCHEME):
            return path.replace(hf_name, public_name(hf_name), 1) if local_hf else path
        return relative_to_roots(path, roots)

    def public(section: str, entry: dict) -> dict:
        entry = dict(entry)
        if section == m.KEY_SKIPPED:  # reasons quote the tokenizer and other inputs
            reason = entry.get(m.KEY_REASON) or ""
            if tokenizer:
                reason = reason.replace(tokenizer, public_name(tokenizer))
            for root in sorted((r for r in roots if r), key=len, reverse=True):
                reason = reason.replace(root.rstrip("/") + "/", "")
            entry[m.KEY_REASON] = reason
        for key in _PATH_KEYS[section]:
            if key in entry:
                entry[key] = rel(entry[key])
        return entry

    return public


_PATH_KEYS = {m.KEY_INPUTS: (m.KEY_PATH,), m.KEY_SKIPPED: (m.KEY_PATH,),
              m.KEY_DUPLICATES: (m.KEY_PATH, m.KEY_DUPLICATE_OF),
              m.KEY_NEAR_DUPLICATES: (m.KEY_PATH, m.KEY_NEAR_DUPLICATE_OF)}


def public_manifest(manifest: dict) -> dict:
    """The manifest as published (a version-1 manifest's per-input sections too; a later version's
    INPUTS_FILE goes through public_entry_function, and its record is then the published file's)."""
    public = public_entry_function(manifest)
    out = copy.deepcopy(manifest)
    config = out[m.KEY_CONFIG]
    hf_name = config.get("hf_dataset") or ""
    for section in m.INPUT_SECTIONS:
        if section in out:
            out[section] = [public(section, entry) for entry in out[section]]
    config["inputs"] = [_public_pattern(p) for p in config.get("inputs", [])]
    config["output"] = _name(config.get("output", ""))
    if hf_name and public_name(hf_name) != hf_name:
        config["hf_dataset"] = public_name(hf_name)
    sha256 = out[m.KEY_TOKENIZER][m.KEY_SHA256]
    config["tokenizer"] = tokenizer_origin(config.get("tokenizer", ""), sha256)
    out[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH] = tokenizer_origin(out[m.KEY_TOKENIZER][m.KEY_NAME_OR_PATH], sha256)
    return out
