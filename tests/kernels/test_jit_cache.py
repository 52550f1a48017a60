"""numba's cache checks only the file defining a kernel: a kernel whose jitted helper lives in another
module keeps running the old helper once that module changes. The kernels' cache is dropped when any kernel source changed,
wherever numba keeps it: `__pycache__`, or the folder `NUMBA_CACHE_DIR` maps the sources to."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from pipeline.kernels.common.jit import drop_stale_kernel_caches
from tests.conftest import REPO

RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from pipeline.kernels.common.jit import drop_stale_kernel_caches
    drop_stale_kernel_caches(Path(sys.argv[1]) / "pkg")
    from pkg.caller import outer
    print(outer())
""")


def _write(path, text):
    path.write_text(textwrap.dedent(text))


@pytest.mark.parametrize("numba_cache_dir", [False, True], ids=["pycache", "NUMBA_CACHE_DIR"])
def test_a_changed_helper_module_is_compiled_again_in_its_callers(tmp_path, numba_cache_dir):
    """With NUMBA_CACHE_DIR set, numba caches under a folder of its own there: dropping `__pycache__`
    alone printed 10 then 10."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _write(pkg / "helper.py", """
        from pipeline.kernels.common.jit import kernel

        @kernel()
        def inner():
            return 1
    """)
    _write(pkg / "caller.py", """
        from pipeline.kernels.common.jit import kernel
        from pkg.helper import inner

        @kernel()
        def outer():
            return inner() * 10
    """)
    (tmp_path / "run.py").write_text(RUN)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(REPO)
    cache = pkg / "__pycache__"
    if numba_cache_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
        cache = tmp_path / "numba-cache"

    def outer() -> str:
        return subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    assert outer() == "10"
    assert any(p.suffix == ".nbc" for p in cache.rglob("*"))  # outer() was cached there
    _write(pkg / "helper.py", """
        from pipeline.kernels.common.jit import kernel

        @kernel()
        def inner():
            return 2
    """)
    assert outer() == "20"  # numba alone returned the cached 10


def test_unchanged_sources_keep_their_cache(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    for name in ("a.f-1.py311.nbi", "a.f-1.py311.1.nbc", "a.cpython-311.pyc"):
        (cache / name).write_bytes(b"cached")
    assert drop_stale_kernel_caches(tmp_path) == 2  # no stamp yet: built from unknown sources
    (cache / "a.f-1.py311.nbi").write_bytes(b"cached")
    assert drop_stale_kernel_caches(tmp_path) == 0 and (cache / "a.f-1.py311.nbi").exists()
    (tmp_path / "b.py").write_text("y = 2\n")  # a new module counts as a change
    assert drop_stale_kernel_caches(tmp_path) == 1
    assert (cache / "a.cpython-311.pyc").exists()  # Python's own bytecode is not numba's to drop


def test_a_change_in_one_kernel_package_drops_the_others_caches(tmp_path, monkeypatch):
    """Kernels inline helpers of other packages (`common/` into every tokenizer kernel): one digest
    covers the whole tree, and every package's cache goes when any source changes. Caches in
    `__pycache__` as without `NUMBA_CACHE_DIR` (with it set, an unstamped `__pycache__` is dropped)."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", "")
    for package in ("common", "tokenizer/wordpiece"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "m.py").write_text("x = 1\n")
    assert drop_stale_kernel_caches(tmp_path) == 0  # no caches yet; stamps written
    cached = tmp_path / "tokenizer/wordpiece/__pycache__/m.f-1.py311.nbi"
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(b"cached")
    assert drop_stale_kernel_caches(tmp_path) == 0 and cached.exists()
    (tmp_path / "common" / "m.py").write_text("x = 2\n")
    assert drop_stale_kernel_caches(tmp_path) == 1 and not cached.exists()


_BLAS_USERS = re.compile(r"np\.(dot|vdot|inner|outer|matmul|cov|corrcoef|linalg|kron|tensordot|trace)\b|@ ")
_FIRST_KERNEL = textwrap.dedent("""
    import sys
    import numba
    import numpy as np
    from pipeline.kernels.text.cleaning import normalize_newline_bytes
    assert normalize_newline_bytes(b"a\\r\\nb\\x07") == (b"a\\nb\\x07", 1)  # a cached kernel: numba's registries load
    loaded = "scipy.linalg" in sys.modules
    dot = numba.njit(lambda a, b: np.dot(a, b))  # BLAS in anyone's kernel still works: scipy imported on demand
    print(loaded, dot(np.ones(3), np.ones(3)))
""")


def test_the_first_kernel_of_a_process_loads_without_scipy_linalg():
    done = subprocess.run([sys.executable, "-c", _FIRST_KERNEL], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "3.0"], done.stdout


def test_no_kernel_calls_blas():
    """numba_registries_without_scipy is exact only while no kernel takes a BLAS path."""
    users = [f"{path.relative_to(REPO)}:{number}" for path in sorted((REPO / "pipeline" / "kernels").rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if _BLAS_USERS.search(line.split("#")[0])]
    assert not users, f"kernels calling BLAS (numba's probe then matters): {users}"
