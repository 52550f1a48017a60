"""The first `import apache_beam` of a process, without pandas and pymongo (nor bson).

Beam's `typehints` package imports pandas whenever it is installed, only to register converters for
pandas-typed batched DoFns (`typehints.pandas_type_compatibility`); MaskBeam has none. That import
is ~0.4 CPU-seconds of every job's start (the launcher's; a thread-mode run has no other process).
Likewise `apache_beam.io` imports pymongo and its bson (~0.04 CPU-s) for its MongoDB connector, which
MaskBeam never uses. While Beam is imported, importing either raises ImportError, which Beam takes
as "not installed" (it guards both imports for that); afterwards each imports as usual for whoever
wants it (datasets, a user's code). Beam's other imports are unchanged.
"""

from __future__ import annotations

import logging
import sys
import threading

_lock = threading.Lock()
HIDDEN = ("pandas", "bson", "pymongo")  # Beam imports each only where it is installed, for what MaskBeam never uses
# What Beam's MongoDB connector logs when it finds no pymongo: true, and of no concern to a job.
_NO_MONGO = ("apache_beam.io.mongodbio", "Could not find a compatible bson package.")


class _DropNoMongo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _NO_MONGO[1]


def import_beam() -> None:
    """Import apache_beam, hiding from it each of HIDDEN not imported yet (idempotent)."""
    with _lock:
        if "apache_beam" in sys.modules:
            import apache_beam  # noqa: F401 - already imported (or importing elsewhere): nothing to gain
            return
        hidden = [name for name in HIDDEN if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # the import system raises ImportError for a None entry
        quiet = _DropNoMongo()
        logging.getLogger(_NO_MONGO[0]).addFilter(quiet)
        try:
            import apache_beam  # noqa: F401
        finally:
            logging.getLogger(_NO_MONGO[0]).removeFilter(quiet)
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
