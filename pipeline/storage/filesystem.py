"""Read files of an output on any fsspec filesystem: local paths, `s3://`, `gs://`, `hf://`.

Local paths stay plain paths (memory-mappable); everything else goes through fsspec, which picks
the filesystem from the URL's protocol (s3fs, gcsfs and huggingface_hub register theirs).
"""

from __future__ import annotations

import posixpath
from typing import IO

import fsspec
from fsspec.core import url_to_fs


def is_local(path: str) -> bool:
    """True for a plain path or a `file://` URL."""
    return "://" not in path or path.startswith("file://")


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of `path` and the path as that filesystem spells it."""
    return url_to_fs(path)


def join(base: str, *names: str) -> str:
    """Join with '/' whatever the filesystem (URLs and POSIX paths alike)."""
    return posixpath.join(base, *names)


def exists(path: str) -> bool:
    fs, inner = filesystem(path)
    return fs.exists(inner)


def open_binary(path: str) -> IO[bytes]:
    fs, inner = filesystem(path)
    return fs.open(inner, "rb")


def read_bytes(path: str) -> bytes:
    with open_binary(path) as handle:
        return handle.read()


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def size(path: str) -> int:
    fs, inner = filesystem(path)
    return int(fs.size(inner))


def list_names(folder: str, suffix: str = "") -> list[str]:
    """Base names of the files directly in `folder` ending with `suffix` (sorted; [] if none)."""
    fs, inner = filesystem(folder)
    if not fs.exists(inner):
        return []
    names = (posixpath.basename(p.rstrip("/")) for p in fs.ls(inner, detail=False))
    return sorted(n for n in names if n.endswith(suffix))
