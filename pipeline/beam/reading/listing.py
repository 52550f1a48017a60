"""List local inputs without leaving the input folder: the files a path, folder or glob names.

Beam's own listing of a local folder drops broken links and unreadable entries silently, and a
glob that follows symbolic links recurses through loops (`a -> .`, `b -> .`) until memory runs
out. This listing walks each folder once, never follows a link to a folder, and reads a linked
file only when the link resolves inside the input root; a link out of it (a planted
`book.txt -> ~/.aws/credentials`) is listed as refused, with the reason, and never opened.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from apache_beam.io.filesystem import FileSystem

from pipeline.console.preflight import GLOB_CHARS, _glob_root

__all__ = ["GLOB_CHARS", "InputError", "LocalEntry", "list_local"]


class InputError(ValueError):
    """An `--input` pattern matched nothing, or an input option is inconsistent."""


@dataclass(frozen=True)
class LocalEntry:
    """A file to read, or an entry reported as skipped with `refused` (never opened)."""

    path: str
    size: int = 0
    modified: float = 0.0
    refused: str = ""


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _entry(path: str, root: str) -> LocalEntry:
    if os.path.islink(path) and not _inside(path, root):
        return LocalEntry(path, refused="refused: a symbolic link out of the input folder (not read)")
    try:
        info = os.stat(path)
    except OSError:  # a broken link or an entry that vanished: reading it says why
        return LocalEntry(path)
    return LocalEntry(path, info.st_size, info.st_mtime)


def _walk(top: str, root: str, keep) -> list[LocalEntry]:
    """The files below `top` that `keep(path)` accepts; a folder that `keep` accepts brings all
    its files. Links to folders are not followed (a link out of the root is reported)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        whole = []
        for name in sorted(dirnames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                if not _inside(path, root) and keep(path):
                    out.append(LocalEntry(path, refused="refused: a symbolic link to a folder out of the input "
                                                        "folder (not followed)"))
                continue  # inside the root its files are listed by their own path; never a loop
            if keep(path):
                whole.append(path)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for path in whole:  # a folder a glob matched: all its files (a folder is never an input)
            out.extend(_walk(path, root, lambda p: True))
            dirnames.remove(os.path.basename(path))
        out.extend(_entry(os.path.join(dirpath, name), root) for name in sorted(filenames)
                   if keep(os.path.join(dirpath, name)))
    return out


def list_local(pattern: str) -> list[LocalEntry]:
    """The entries a local path, folder (recursively) or glob names, sorted by path. A file named
    itself is read even when it is a link (the user named it); inside a folder, links are read
    only when they resolve inside it."""
    if not GLOB_CHARS & set(pattern):
        if os.path.isdir(pattern):
            top = pattern.rstrip("/") or "/"
            return sorted(_walk(top, os.path.realpath(top), lambda p: True), key=lambda e: e.path)
        if os.path.lexists(pattern):
            return [_entry(pattern, os.path.realpath(pattern))]
        return []
    top = _glob_root(pattern)
    if not os.path.isdir(top):
        return []
    regex = re.compile(FileSystem.translate_pattern(pattern))
    prefix = "" if pattern.startswith(top) else "./"
    return sorted(_walk(top.rstrip("/") or "/", os.path.realpath(top),
                        lambda p: bool(regex.match(p[len(prefix):] if prefix and p.startswith(prefix) else p))),
                  key=lambda e: e.path)
