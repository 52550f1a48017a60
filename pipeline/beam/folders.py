"""Folders on any Beam filesystem. Object stores (S3, GCS) have no directories: a "folder" is a key
prefix, `FileSystems.exists(prefix)` is False even when objects lie below it, and deleting one takes
the prefix with a trailing slash. These helpers behave the same on local disk and object stores."""

from __future__ import annotations

import posixpath

from apache_beam.io.filesystems import FileSystems


def has_files(folder: str) -> bool:
    """Whether any file (object) lies below `folder`."""
    try:
        listing = FileSystems.match([posixpath.join(folder.rstrip("/"), "**")])[0].metadata_list
    except Exception:  # noqa: BLE001 - Beam raises BeamIOError (and others) for a missing local folder
        return False
    return bool(listing)


def delete_folder(folder: str) -> None:
    """Delete `folder` and everything below it; nothing happens when it does not exist."""
    if has_files(folder):
        FileSystems.delete([folder.rstrip("/") + "/"])
    elif FileSystems.exists(folder):  # an empty local directory
        FileSystems.delete([folder])
