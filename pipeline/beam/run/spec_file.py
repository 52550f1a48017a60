"""The tokenizer travels to workers as a file in the output's temp folder, not inside every DoFn.

Beam pickles each DoFn and bz2-compresses the pickle when it builds the job graph, then decompresses
it again for every bundle processor a worker builds. A DoFn holding a `TokenizerSpec` carries the
whole tokenizer.json (0.5 MB for BERT's, tens of MB for large vocabularies): in a run on one 50 kB
book that bz2 work took 4.9 s of a 10 s run. So the job writes the spec once, next to its part files,
and the DoFns carry only its path and sha256 (`SpecFile`); each process reads it once (the launcher
never: it registers the spec it wrote), and a copy whose sha256 differs is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import threading
from dataclasses import dataclass

from apache_beam.io.filesystems import FileSystems

from pipeline.beam.writing.arrow_io import write_text
from pipeline.tokenizer.spec import TokenizerSpec

_LOADED: dict[str, TokenizerSpec] = {}  # sha256 of the file -> its spec, in this process
_LOCK = threading.Lock()


class SpecFileError(RuntimeError):
    """The tokenizer copy in the temp folder is missing or not the one this job wrote."""


@dataclass(frozen=True)
class SpecFile:
    path: str
    sha256: str

    def load(self) -> TokenizerSpec:
        """The spec, read and checked once per process."""
        with _LOCK:
            spec = _LOADED.get(self.sha256)
            if spec is None:
                spec = _LOADED[self.sha256] = _read(self)
            return spec


_ENCODED: list[tuple[TokenizerSpec, bytes]] = []  # the last few specs shipped, with their encoding


def _encode(spec: TokenizerSpec) -> bytes:
    """The spec's fields as JSON (tuples as lists), made once per spec a process ships (the graph
    ships it twice): `dataclasses.asdict` copied each id tuple element by element (~17 ms for BERT's)."""
    with _LOCK:
        for shipped, data in _ENCODED:
            if shipped is spec:
                return data
    data = json.dumps({f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}, sort_keys=True,
                      ensure_ascii=False).encode("utf-8")
    with _LOCK:
        _ENCODED[:] = [*_ENCODED[-2:], (spec, data)]
    return data


def ship_spec(spec: TokenizerSpec, temp_dir: str) -> SpecFile:
    """Write `spec` into `temp_dir` (once per content) and return the reference the DoFns carry."""
    data = _encode(spec)
    digest = hashlib.sha256(data).hexdigest()
    shipped = SpecFile(posixpath.join(temp_dir, f"tokenizer-spec-{digest[:16]}.json"), digest)
    with _LOCK:
        if _LOADED.get(digest) is None or not FileSystems.exists(shipped.path):
            write_text(shipped.path, data.decode("utf-8"))
        _LOADED[digest] = spec
    return shipped


def _read(shipped: SpecFile) -> TokenizerSpec:
    try:
        with FileSystems.open(shipped.path) as handle:
            data = handle.read()
    except Exception as error:  # FileSystems raises BeamIOError, IOError, or the store's own errors
        raise SpecFileError(f"cannot read the job's tokenizer copy {shipped.path}: {error} (was the output's "
                            "temp folder removed while the job ran?)") from error
    if hashlib.sha256(data).hexdigest() != shipped.sha256:
        raise SpecFileError(f"the job's tokenizer copy {shipped.path} changed while the job ran (sha256 differs)")
    fields = json.loads(data)
    for name in ("special_ids", "unused_ids", "continuation_ids"):
        fields[name] = tuple(fields[name])
    return TokenizerSpec(**fields)
