"""The long profile of the differential fuzz test of the readers (tests/fuzz/test_differential.py):
the same properties with many more hypothesis examples (CI runs 60).

    python -m benchmarks.fuzz_readers [EXAMPLES]     # default 2000
"""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    examples = args[0] if args else "2000"
    env = {**os.environ, "MASKBEAM_FUZZ_EXAMPLES": examples}
    return subprocess.call([sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider"], env=env)


if __name__ == "__main__":
    raise SystemExit(main())
