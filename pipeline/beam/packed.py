"""The job's own values as bytes, for its shuffles and the files of its temp folder.

Beam's local runner keeps a GroupByKey's values decoded until their consumer runs, and a result
decoded is several times its pickled size: the job packs what waits there, and spills plan buckets,
shard pieces and shard tasks to its temp folder. Those files sit under the output folder, where
anyone who can write there could plant one; so they are read back by an unpickler that builds only
builtin containers and scalars and the record types registered here (`allow`), and imports no
module outside `pipeline`: a planted file can at most give wrong values (which the writers' own
checks and the manifest's hashes then meet), never run code (tests/security/test_no_code_from_data.py).
"""

from __future__ import annotations

import io
import pickle

_BUILTINS = frozenset({"tuple", "list", "dict", "set", "frozenset", "bytes", "bytearray", "str", "int",
                       "float", "bool", "complex", "slice"})
_ALLOWED: set[tuple[str, str]] = set()


class PackedValueRefused(pickle.UnpicklingError):
    """A packed value named something the job never packs: the file was not written by the job."""


def allow(*objects: object) -> None:
    """Let packed values build `objects` (classes, or a class's own reconstructor function)."""
    for obj in objects:
        _ALLOWED.add((obj.__module__, obj.__qualname__))


class _JobUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise PackedValueRefused(f"a packed value names {module}.{name}, which the job never packs: the temp "
                                 "file or shuffle value was not written by this job (remove the run's temp folder)")


def pack(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(blob: bytes) -> object:
    """The value `pack` gave `blob`; PackedValueRefused if it names anything not allowed."""
    return _JobUnpickler(io.BytesIO(blob)).load()
