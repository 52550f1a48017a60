"""Where an input's MinHash signature lies while the job runs, so that no element of the job has to
carry it (2 KB an input; its joins by input held every input's signature in memory at once on the
local runner): only the few inputs of candidate pairs are ever read back.

* a whole input's signature is in its unit's result record (`unit_results.save_result`, or its
  group's record file: written by the worker before the result leaves it, for --resume), read back
  by the input's name (its source, `unit_results.read_record`);
* a file read in byte ranges has the merge of its ranges' signatures, written once its ranges are
  together to a file of its own (`write_signature`) beside its parts.

A signature's place is one small int (`IN_RESULT`, `IN_FILE`) that travels with the input's name.
"""

from __future__ import annotations

import numpy as np

from pipeline.beam.unit_results import read_record, result_path, unit_file_stem
from pipeline.beam.writing.arrow_io import read_text, write_text

IN_RESULT = 0  # the signature of its unit's result record
IN_FILE = 1  # a file of its own (a file read in byte ranges: its ranges' merged signature)
PLACES = (IN_RESULT, IN_FILE)


class SignatureMissing(RuntimeError):
    """An input's signature is not where the job put it (its temp folder changed while it ran)."""


def signature_file(temp_dir: str, name: str) -> str:
    return f"{unit_file_stem(temp_dir, name)}-signature.hex"


def write_signature(temp_dir: str, name: str, signature: np.ndarray) -> int:
    """Write the signature of input `name` to its own file; returns its place, IN_FILE."""
    write_text(signature_file(temp_dir, name), np.ascontiguousarray(signature, dtype=np.uint64).tobytes().hex())
    return IN_FILE


def read_signature(temp_dir: str, name: str, place: int) -> np.ndarray:
    """The signature of input `name` from `place` (IN_RESULT or IN_FILE).

    Raises:
        SignatureMissing: naming the file that should hold it.
    """
    if place not in PLACES:
        raise ValueError(f"unknown signature place {place!r} of {name}; expected one of {PLACES}")
    path = signature_file(temp_dir, name) if place == IN_FILE else result_path(temp_dir, name)
    try:
        hexed = read_text(path) if place == IN_FILE else read_record(temp_dir, name)["result"]["signature"]
    except (OSError, ValueError, KeyError) as error:
        raise SignatureMissing(f"the MinHash signature of {name} is not in {path} ({type(error).__name__}: "
                               f"{error}); was the temp folder changed or removed during the run?") from error
    if not hexed:
        raise SignatureMissing(f"{path} holds no MinHash signature of {name}")
    return np.frombuffer(bytes.fromhex(hexed), dtype=np.uint64)
