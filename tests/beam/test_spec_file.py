"""The tokenizer reaches workers as one file in the temp folder; DoFns carry only its path and sha256."""

from __future__ import annotations

import subprocess
import sys

import pytest
from apache_beam.internal import pickler

from pipeline.beam.run import spec_file
from pipeline.beam.run.config import PreprocessConfig
from pipeline.beam.run.spec_file import SpecFileError, ship_spec
from pipeline.beam.transforms import TokenizeAndChunk
from tests.conftest import REPO


def test_dofns_carry_a_reference_not_the_tokenizer(spec, tmp_path):
    """A DoFn used to pickle the whole tokenizer.json (Beam bz2-compresses it for every bundle processor)."""
    config = PreprocessConfig(inputs=("x",), output=str(tmp_path / "out"), tokenizer="t")
    transform = TokenizeAndChunk(spec=spec, config=config, temp_dir=str(tmp_path / "tmp"))
    from pipeline.beam.transforms import _ProcessUnitFn

    pickled = pickler.dumps(_ProcessUnitFn(*transform._args))
    assert len(pickled) < 20_000 < len(spec.json), len(pickled)
    assert len(list((tmp_path / "tmp").glob("tokenizer-spec-*.json"))) == 1


def test_another_process_reads_the_same_spec_and_a_changed_copy_is_refused(spec, tmp_path):
    shipped = ship_spec(spec, str(tmp_path))
    code = ("import pickle, sys; from pipeline.beam.run.spec_file import SpecFile; "
            f"s = SpecFile({shipped.path!r}, {shipped.sha256!r}).load(); "
            "sys.stdout.buffer.write(pickle.dumps((s.json, s.cls_id, s.continuation_ids, s.unused_ids)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, check=True).stdout
    import pickle

    assert pickle.loads(out) == (spec.json, spec.cls_id, spec.continuation_ids, spec.unused_ids)  # noqa: S301
    with open(shipped.path, "r+b") as handle:  # one byte changed in place
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 1]))
    spec_file._LOADED.pop(shipped.sha256)  # as in a worker process that never saw the launcher's copy
    with pytest.raises(SpecFileError, match="changed while the job ran"):
        shipped.load()
    (tmp_path / shipped.path.rsplit("/", 1)[1]).unlink()
    with pytest.raises(SpecFileError, match="cannot read the job's tokenizer copy"):
        shipped.load()
