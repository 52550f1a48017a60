"""numpy <-> Arrow without pyarrow's pandas probe: the same arrays as `pa.array` / `to_numpy`, and
pandas left unimported (it is ~0.4 CPU-seconds of every job's worker)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipeline.storage.arrow_files import array_to_numpy, fixed_list_array, fixed_list_to_numpy, numpy_array
from tests.conftest import REPO

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numeric_arrays_are_the_ones_pyarrow_makes(dtype):
    values = (np.arange(-20, 30) * 7).astype(dtype)
    for view in (values, values[3:41], values[::3]):  # whole, an offset, a strided view (copied)
        ours = numpy_array(view)
        assert ours.type == pa.array(view).type and ours.equals(pa.array(view)) and ours.null_count == 0
        back = array_to_numpy(ours)
        assert back.dtype == view.dtype and np.array_equal(back, view)
    sliced = pa.array(values).slice(5, 17)
    assert np.array_equal(array_to_numpy(sliced), sliced.to_numpy()) and array_to_numpy(sliced).dtype == values.dtype


def test_other_arrays_go_to_pyarrow():
    assert numpy_array(np.array([True, False])).equals(pa.array([True, False]))
    with_null = pa.array([1, None, 3], type=pa.int32())
    assert np.allclose(array_to_numpy(with_null), with_null.to_numpy(zero_copy_only=False), equal_nan=True)


def test_fixed_size_lists_round_trip_with_offsets():
    rows = np.arange(60, dtype=np.int32).reshape(10, 6)
    column = fixed_list_array(rows)
    assert column.equals(pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), 6))
    assert np.array_equal(fixed_list_to_numpy(column.slice(3, 4), 6), rows[3:7])


_NO_PANDAS = """
import sys
import numpy as np
from pipeline.storage.arrow_files import array_to_numpy, fixed_list_array, fixed_list_to_numpy, numpy_array
rows = np.arange(12, dtype=np.uint16).reshape(3, 4)
assert np.array_equal(fixed_list_to_numpy(fixed_list_array(rows), 4), rows)
assert array_to_numpy(numpy_array(np.arange(5, dtype=np.uint64))).sum() == 10
print("pandas" in sys.modules)
"""


def test_conversions_leave_pandas_unimported():
    done = subprocess.run([sys.executable, "-c", _NO_PANDAS], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
