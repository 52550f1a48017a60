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
from collections.abc import Iterator
from dataclasses import dataclass

from apache_beam.io.filesystem import FileSystem

from pipeline.console.preflight import GLOB_CHARS, _glob_root

__all__ = ["GLOB_CHARS", "InputError", "LocalEntry", "iter_local", "list_local"]


class InputError(ValueError):
    """An `--input` pattern matched nothing, or an input option is inconsistent."""


@dataclass(frozen=True, slots=True)
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


def _sorted_names(top: str) -> list[tuple[str, str, bool]]:
    """(sort key, name, is a folder) of each entry of `top`, in the order of the paths below them:
    a folder's key ends in "/", so `a.txt` comes before `a/x` as the paths sort. A folder that
    cannot be read lists nothing, as `os.walk` does."""
    try:
        with os.scandir(top) as entries:
            names = []
            for entry in entries:
                try:
                    folder = entry.is_dir()
                except OSError:
                    folder = False
                names.append((entry.name + "/" if folder and not entry.is_symlink() else entry.name, entry.name,
                              folder))
    except OSError:
        return []
    names.sort()
    return names


def _walk(top: str, root: str, keep) -> Iterator[LocalEntry]:
    """The files below `top` that `keep(path)` accepts, in path order, one folder's names held at a
    time; a folder that `keep` accepts brings all its files. Links to folders are not followed (a
    link out of the root is reported; inside it, its files are listed by their own path)."""
    for _, name, folder in _sorted_names(top):
        path = os.path.join(top, name)
        if folder and os.path.islink(path):
            if not _inside(path, root) and keep(path):
                yield LocalEntry(path, refused="refused: a symbolic link to a folder out of the input folder (not "
                                               "followed)")
        elif folder:
            yield from _walk(path, root, (lambda p: True) if keep(path) else keep)
        elif keep(path):
            yield _entry(path, root)


def iter_local(pattern: str) -> Iterator[LocalEntry]:
    """The entries a local path, folder (recursively) or glob names, in path order, listed as they
    are read: a folder of a million files is never held whole. A file named itself is read even
    when it is a link (the user named it); inside a folder, links are read only when they resolve
    inside it."""
    if not GLOB_CHARS & set(pattern):
        if os.path.isdir(pattern):
            top = pattern.rstrip("/") or "/"
            yield from _walk(top, os.path.realpath(top), lambda p: True)
        elif os.path.lexists(pattern):
            yield _entry(pattern, os.path.realpath(pattern))
        return
    top = _glob_root(pattern)
    if not os.path.isdir(top):
        return
    regex = re.compile(FileSystem.translate_pattern(pattern))
    prefix = "" if pattern.startswith(top) else "./"
    yield from _walk(top.rstrip("/") or "/", os.path.realpath(top),
                     lambda p: bool(regex.match(p[len(prefix):] if prefix and p.startswith(prefix) else p)))


def list_local(pattern: str) -> list[LocalEntry]:
    """`iter_local(pattern)` as a list."""
    return list(iter_local(pattern))
