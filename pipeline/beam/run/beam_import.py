"""The first `import apache_beam` of a process, without pandas and pymongo (nor bson).

Beam's `typehints` package imports pandas whenever it is installed, only to register converters for
pandas-typed batched DoFns (`typehints.pandas_type_compatibility`); MaskBeam has none. That import
is ~0.4 CPU-seconds of every job's start (the launcher's; a thread-mode run has no other process).
Likewise `apache_beam.io` imports pymongo and its bson (~0.04 CPU-s) for its MongoDB connector, which
MaskBeam never uses. While Beam is imported, importing either raises ImportError, which Beam takes
as "not installed" (it guards both imports for that); afterwards each imports as usual for whoever
wants it (datasets, a user's code). Beam's other imports are unchanged.

boto3 (with botocore and s3transfer, ~0.09 CPU-s) is hidden the same way, but Beam's S3 support is
kept: Beam's boto3 wrapper (`apache_beam.io.aws.clients.s3.boto3_client`) guards its own `import
boto3` and holds None for it; where boto3 is installed, it gets a stand-in that imports boto3 the
first time an S3 client is built. A job that touches no `s3://` path never imports boto3.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading

_lock = threading.Lock()
HIDDEN = ("pandas", "bson", "pymongo", "boto3")  # Beam imports each only where installed (boto3: see LazyBoto3)
BOTO3_CLIENT = "apache_beam.io.aws.clients.s3.boto3_client"
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
        if "boto3" in hidden:
            _defer_boto3()


class LazyBoto3:
    """Stands for the `boto3` module in Beam's boto3 wrapper (`boto3_client`, which imported it as
    None while it was hidden) until an S3 client is first built: then imports boto3, puts it in the
    wrapper's own place and answers as it does."""

    def __init__(self, wrapper) -> None:
        self._wrapper = wrapper
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy, pickle and inspect probes: a stand-in has none of these
            raise AttributeError(name)
        with self._lock:
            boto3 = importlib.import_module("boto3")
            self._wrapper.boto3 = boto3
        return getattr(boto3, name)


def _defer_boto3() -> None:
    """After Beam's import with boto3 hidden: where boto3 is installed, Beam's S3 wrapper as it would
    have been, with boto3 imported on first use."""
    wrapper = sys.modules.get(BOTO3_CLIENT)
    if wrapper is None or getattr(wrapper, "boto3", True) is not None:
        return
    if importlib.util.find_spec("boto3") is None:  # not installed: Beam's own "Missing boto3" error stays
        return
    wrapper.boto3 = LazyBoto3(wrapper)


def boto3_deferred() -> bool:
    """Whether Beam's S3 wrapper still holds the stand-in (boto3 not imported for it yet)."""
    return isinstance(getattr(sys.modules.get(BOTO3_CLIENT), "boto3", None), LazyBoto3)
