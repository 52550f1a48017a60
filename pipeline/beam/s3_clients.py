"""One boto3 client per set of S3 options per process, shared by all of Beam's S3 calls.

Beam's `S3FileSystem` builds a new `S3IO`, hence a new boto3 session and client, for every call
(match, exists, open, delete, rename...): about 0.3 s each, because a new session loads botocore's
service model again. A preprocess run on `s3://` makes dozens of such calls (listing, result
records, parts, shards, progress), most of the wall time of a small run (the S3 prefix test of
`tests/jobs/test_object_store.py`, five one-book runs: 161 clients, 45 of its 54 s). Low-level
boto3 clients are thread-safe and Beam's wrapper keeps its per-download state on itself, so each
wrapper still gets its own state and only the boto3 client underneath is shared, keyed by the
options that shape it and by process (a client is not carried across a fork).
"""

from __future__ import annotations

import copy
import os
import threading

_lock = threading.Lock()
_clients: dict[tuple, tuple[object, dict]] = {}
_installed = False


def _key(options) -> tuple:
    """The values Beam's boto3 wrapper builds its client from, read as it reads them."""
    from apache_beam.options import pipeline_options

    names = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token", "s3_endpoint_url", "s3_disable_ssl",
             "s3_region_name", "s3_api_version", "s3_verify")
    if isinstance(options, pipeline_options.PipelineOptions):
        s3 = options.view_as(pipeline_options.S3Options)
        values = tuple(getattr(s3, name, None) for name in names)
    else:
        values = tuple(options.get(name) for name in names)
    return (os.getpid(), *values)


def reuse_s3_clients() -> bool:
    """Make Beam's S3 filesystem share boto3 clients (idempotent). False when Beam's AWS support is
    not installed or its wrapper is not shaped as expected (then nothing is changed)."""
    global _installed
    if _installed:
        return True
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return False
    wrapper = boto3_client.Client
    original = wrapper.__init__
    if getattr(original, "__name__", "") != "__init__" or not hasattr(wrapper, "get_object_metadata"):
        return False

    def __init__(self, options) -> None:  # noqa: N807 - replaces the wrapper's constructor
        key = _key(options)
        with _lock:
            if key not in _clients:
                original(self, options)
                # the client, and what else the constructor set as it left it (the state of one download)
                _clients[key] = (self.client, {k: copy.copy(v) for k, v in vars(self).items() if k != "client"})
                return
            client, initial = _clients[key]
        self.__dict__.update({k: copy.copy(v) for k, v in initial.items()})
        self.client = client

    wrapper.__init__ = __init__
    _installed = True
    return True
