"""Rows of a `datasets` dataset (`--hf_dataset`): loading it once per process at a pinned
revision, and the text column of a row range."""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam.reading.formats.source import RecordScan, RecordSource, Skip
from pipeline.beam.reading.listing import InputError


@functools.lru_cache(maxsize=4)
def load_hf_dataset(name: str, split: str, revision: str = ""):
    """A `datasets` Dataset: a local `save_to_disk` folder, else a Hub or local loadable dataset at
    `revision` (a Hub commit). Kept per process, keyed by the revision (a local folder's
    fingerprint), so a worker maps it once, not once per unit, and a changed folder is reloaded."""
    import datasets

    if FileSystems.exists(posixpath.join(name, "dataset_dict.json")):
        return datasets.load_from_disk(name)[split]
    if FileSystems.exists(posixpath.join(name, "state.json")):
        return datasets.load_from_disk(name)
    return datasets.load_dataset(name, split=split, revision=_hub_revision(revision) or None)


def hf_revision(name: str, split: str) -> str:
    """What pins the dataset's content: the Hub commit sha of a Hub dataset (resolved now, so every
    worker and a --resume read the same commit), the `datasets` fingerprint of a local folder."""
    for state in (posixpath.join(name, split, "state.json"), posixpath.join(name, "state.json")):
        if FileSystems.exists(state):
            with FileSystems.open(state, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                return f"fingerprint:{json.loads(handle.read())['_fingerprint']}"
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(name).sha or ""
    except Exception as error:  # the hub client raises many types; all mean "cannot resolve"
        raise InputError(f"--hf_dataset {name!r}: cannot resolve its revision on the Hub ({error})") from error


def _hub_revision(revision: str) -> str:
    return "" if revision.startswith("fingerprint:") else revision


def hf_values(name: str, split: str, revision: str, start: int, stop: int, column: str) -> Iterator[object]:
    """The `column` values of rows [start, stop) of a dataset."""
    yield from load_hf_dataset(name, split, revision).select(range(start, stop))[column]


def read_hf(source: RecordSource, column: str, skip: Skip, scan: RecordScan | None) -> Iterator[object]:
    """The `column` values of a dataset unit's row range."""
    unit = source.unit
    yield from hf_values(unit.hf_name, unit.hf_split, unit.revision, unit.start, unit.stop, column)
