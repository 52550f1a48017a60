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
    folder = folder.rstrip("/")
    if FileSystems.get_scheme(folder) in (None, "file"):
        if FileSystems.exists(folder):  # a local directory: removed as a whole (with a slash Beam empties it)
            FileSystems.delete([folder])
    elif has_files(folder):
        FileSystems.delete([folder + "/"])  # an object-store prefix: every object below it
