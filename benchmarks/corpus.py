"""Build benchmark corpora: the shared books repeated under distinct names, each copy made distinct."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def corpus_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def corpus_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in corpus_files(folder))


def scaled_corpus(source: Path, scale: int, target: Path) -> Path:
    """`scale` copies of every file of `source` under `target/copyK/`. Copy K > 0 gets one extra
    first line so its content hash, and so its rows' seeds, differ from the original's."""
    if scale == 1:
        return source
    for k in range(scale):
        folder = target / f"copy{k}"
        folder.mkdir(parents=True, exist_ok=True)
        for path in corpus_files(source):
            dest = folder / path.name
            if k == 0:  # a hard link or a copy: the job never follows a symbolic link out of its input folder
                try:
                    os.link(path.resolve(), dest)
                except OSError:
                    shutil.copyfile(path, dest)
            else:
                dest.write_bytes(f"Copy {k}.\n".encode() + path.read_bytes())
    return target
