"""Checks of a command line that need no library: a local path that does not exist is named in one line
before a job imports Beam, torch or transformers (seconds on a loaded machine). The full checks (the
listing, the tokenizer's content, remote paths) come later; these give the same messages for the cases
they can decide alone. Standard library only."""

from __future__ import annotations

import os

GLOB_CHARS = frozenset("*?[")


def looks_like_path(name: str) -> bool:
    """A Hub id is `name` or `org/name`; anything else that does not exist is a missing path."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith(".json")
            or (os.sep != "/" and os.sep in name))


def no_input_message(pattern: str) -> str:
    """What an `--input` that names no file gets (a folder holding none, or nothing at all)."""
    what = "is a folder holding no file" if "://" not in pattern and os.path.isdir(pattern) else "matches no file"
    return f"--input {pattern!r} {what}"


def _glob_root(pattern: str) -> str:
    """The deepest folder of `pattern` before its first glob character."""
    head = pattern
    for i, char in enumerate(pattern):
        if char in GLOB_CHARS:
            head = pattern[:i]
            break
    return head[: head.rfind("/") + 1] or "."


def missing_local_input(pattern: str) -> str | None:
    """The error for a local `--input` that cannot name any file (the path, or the folder before its
    first glob character, does not exist), or None: remote patterns and the rest are the listing's."""
    if "://" in pattern:
        return None
    if GLOB_CHARS & set(pattern):
        return None if os.path.isdir(_glob_root(pattern)) else no_input_message(pattern)
    return None if os.path.lexists(pattern) else no_input_message(pattern)


def missing_tokenizer(name: str) -> str | None:
    """The error for a `--tokenizer` that is a path (not a Hub id) that does not exist, or None."""
    if os.path.exists(name) or not looks_like_path(name):
        return None
    return f"tokenizer path {name!r} does not exist"


def missing_folder(path: str) -> str | None:
    """`'PATH' does not exist` for a local folder (or file) that does not exist, else None (remote
    paths are the readers')."""
    return None if "://" in path or os.path.exists(path) else f"{path!r} does not exist"
