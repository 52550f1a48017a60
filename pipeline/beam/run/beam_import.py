"""The first `import apache_beam` of a process, without pandas.

Beam's `typehints` package imports pandas whenever it is installed, only to register converters for
pandas-typed batched DoFns (`typehints.pandas_type_compatibility`); MaskBeam has none. That import
is ~0.4 CPU-seconds of every job's start (the launcher's; a thread-mode run has no other process).
While Beam is imported, `import pandas` raises ImportError, which Beam takes as "not installed";
afterwards pandas imports as usual for whoever wants it (datasets, a user's code). Beam's other
imports are unchanged.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()


def import_beam() -> None:
    """Import apache_beam, hiding pandas from it when neither is imported yet (idempotent)."""
    with _lock:
        if "apache_beam" in sys.modules or "pandas" in sys.modules:
            import apache_beam  # noqa: F401 - already imported, or pandas is there anyway: nothing to gain
            return
        sys.modules["pandas"] = None  # the import system raises ImportError for a None entry
        try:
            import apache_beam  # noqa: F401
        finally:
            if "pandas" in sys.modules and sys.modules["pandas"] is None:
                del sys.modules["pandas"]
