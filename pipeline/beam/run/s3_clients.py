"""One boto3 client per S3 configuration per process, shared by all of Beam's S3 calls.

Beam's `S3FileSystem` builds a new `S3IO`, hence a new boto3 session and client, for every call
(match, exists, open, delete, rename...): about 0.3 s each, because a new session loads botocore's
service model again. A preprocess run on `s3://` makes dozens of such calls (listing, result
records, parts, shards, progress), most of the wall time of a small run (the S3 prefix test of
`tests/jobs/test_object_store.py`, five one-book runs: 161 clients, 45 of its 54 s).

Beam offers no supported hook for this (`S3FileSystem` passes only options to `S3IO`), so the
sharing wraps the constructor of Beam's private boto3 wrapper (`apache_beam.io.aws.clients.s3.
boto3_client.Client`), and it does so only where that is known to be right:

- only a constructor whose source is one we reviewed (`REVIEWED_CONSTRUCTORS`, by sha256: the
  sources of apache-beam 2.77 and 2.78), and from 2.78 on only with the functions it takes its
  settings from reviewed too (`REVIEWED_CLIENT_SETTINGS`): any other Beam gets no sharing, a warning,
  and its own clients (slower, never wrong). `tests/beam/test_s3_clients.py` fails loudly when the
  installed Beam's are not reviewed ones, so an upgrade is reviewed, not silently unpatched;
- a client is reused only for exactly the configuration it was built from: every `s3_*` option and,
  from Beam 2.78 on (whose S3 client takes the `--aws_*` options as defaults under the `--s3_*`
  ones), every `aws_*` option Beam declares (read from `S3Options` and `AwsOptions` themselves, not
  from a list of ours), the environment variables botocore reads when it builds a client (every
  `AWS_*`, the proxies, the CA bundles, `HOME` for `~/.aws`), and the process (a client is not
  carried across a fork).

Low-level boto3 clients are thread-safe and Beam's wrapper keeps its per-download state on itself,
so each wrapper still gets its own state and only the boto3 client underneath is shared.

It is installed when `pipeline.beam` is imported (every process that runs our Beam code imports it
to unpickle the DoFns); it changes nothing for wrappers built under another configuration.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import logging
import os
import threading

_log = logging.getLogger("maskbeam.beam")
_lock = threading.Lock()
_clients: dict[tuple, tuple[object, dict]] = {}
_installed: set[int] = set()  # id() of wrapper classes whose constructor is ours

# sha256 of `inspect.getsource(boto3_client.Client.__init__)` for the Beam releases whose constructor
# was read: it builds the client from the options (PipelineOptions or a dict of them) and a new boto3
# session alone, and sets only `client` and the download state `_download_request/_download_stream/
# _download_pos`. 2.77 reads the S3Options; 2.78 reads them through `client_options` (below).
REVIEWED_CONSTRUCTORS = {
    "1cf60e5ab4b1b18021cf0464d836b40cd65aab307ae9148c2f66326f3d9b6d8b": "apache-beam 2.77",
    "246eebe75afe59946bc8c56f1736c8a62b720c1ab70df7c20af84526467676ab": "apache-beam 2.78",
}
# sha256 of the sources of CLIENT_SETTINGS, where Beam has them (2.78 on), as `settings_digest` reads
# them: the `aws_*` options overridden by the `s3_*` ones, from the options alone; credentials may be
# resolved by `--aws_credentials_secret_manager` (Beam caches up to 32 resolved secrets per process:
# a shared client keeps the credentials it was built with, as each of Beam's own would while cached).
CLIENT_SETTINGS = ("apache_beam.io.aws.clients.client_options:view_options",
                   "apache_beam.io.aws.clients.client_options:get_client_kwargs",
                   "apache_beam.io.aws.clients.client_options:_parse_credential",
                   "apache_beam.options.pipeline_options:AwsOptions.get_client_settings")
REVIEWED_CLIENT_SETTINGS = {
    "": "apache-beam 2.77 and older: no client_options, the constructor reads the S3Options itself",
    "cc9e7f115e199b6e85ff9489342b793ea756ef03ecc5de1cf8ef5e5c4d6c343f": "apache-beam 2.78",
}
# Read by botocore when it builds a client, besides the AWS_* ones (and ~/.aws under HOME).
_CLIENT_ENVIRONMENT = ("HOME", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
                       "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def constructor_digest(wrapper: type) -> str | None:
    """sha256 of the source of `wrapper.__init__`; None when its source cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(wrapper.__init__).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _client_settings_functions() -> list:
    """The functions of CLIENT_SETTINGS in the installed Beam, None for each it lacks."""
    from apache_beam.options import pipeline_options

    try:
        from apache_beam.io.aws.clients import client_options
    except ImportError:
        client_options = None
    aws_options = getattr(pipeline_options, "AwsOptions", None)
    return [getattr(client_options, "view_options", None), getattr(client_options, "get_client_kwargs", None),
            getattr(client_options, "_parse_credential", None), getattr(aws_options, "get_client_settings", None)]


def settings_digest() -> str | None:
    """sha256 of the sources of the installed Beam's CLIENT_SETTINGS; "" where it has none of them
    (2.77 and older); None where only some are there or a source cannot be read."""
    functions = _client_settings_functions()
    if all(function is None for function in functions):
        return ""
    if any(function is None for function in functions):
        return None
    try:
        return hashlib.sha256("".join(inspect.getsource(function) for function in functions).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def s3_option_names() -> tuple[str, ...]:
    """Every option Beam's `S3Options` and, where Beam has them (2.78 on), `AwsOptions` declare (what
    its S3 client may be built from)."""
    import argparse

    from apache_beam.options import pipeline_options

    parser = argparse.ArgumentParser(add_help=False)
    for options in ("S3Options", "AwsOptions"):
        if hasattr(pipeline_options, options):
            getattr(pipeline_options, options)._add_argparse_args(parser)
    return tuple(sorted({action.dest for action in parser._actions}))


def configuration(options) -> tuple:
    """What a boto3 client built by Beam's wrapper from `options` depends on: the process, every
    option of `s3_option_names` and the environment variables botocore reads."""
    from apache_beam.options import pipeline_options

    names = s3_option_names()
    if isinstance(options, pipeline_options.PipelineOptions):
        views = [options.view_as(getattr(pipeline_options, cls)) for cls in ("S3Options", "AwsOptions")
                 if hasattr(pipeline_options, cls)]
        values = tuple((name, repr(next((getattr(view, name) for view in views if hasattr(view, name)), None)))
                       for name in names)
    else:
        values = tuple((name, repr(options.get(name))) for name in names)
    environment = tuple(sorted((k, v) for k, v in os.environ.items()
                               if k.startswith("AWS_") or k in _CLIENT_ENVIRONMENT))
    return os.getpid(), values, environment


def reuse_s3_clients(wrapper: type | None = None) -> bool:
    """Make Beam's S3 wrapper share boto3 clients (idempotent). Returns whether sharing is on: False
    when Beam's AWS support is not installed or its constructor is not a reviewed one (then nothing
    is changed, and a warning says why).

    Args:
        wrapper: the wrapper class (tests pass a stand-in); default Beam's `boto3_client.Client`.
    """
    if wrapper is None:
        try:
            from apache_beam.io.aws.clients.s3 import boto3_client
        except ImportError:
            return False
        wrapper = boto3_client.Client
    if id(wrapper) in _installed:
        return True
    digest = constructor_digest(wrapper)
    if digest not in REVIEWED_CONSTRUCTORS:
        _log.warning("Beam's S3 client constructor (%s.%s, sha256 %s) is not one MaskBeam reviewed: S3 clients are "
                     "not shared (each S3 call builds its own, ~0.3 s); see pipeline/beam/run/s3_clients.py",
                     wrapper.__module__, wrapper.__qualname__, digest)
        return False
    settings = settings_digest()
    if settings not in REVIEWED_CLIENT_SETTINGS:
        _log.warning("Beam's S3 client settings (%s, sha256 %s) are not ones MaskBeam reviewed: S3 clients are not "
                     "shared (each S3 call builds its own, ~0.3 s); see pipeline/beam/run/s3_clients.py",
                     ", ".join(CLIENT_SETTINGS), settings)
        return False
    original = wrapper.__init__

    def __init__(self, options) -> None:  # noqa: N807 - replaces the wrapper's constructor
        key = configuration(options)
        with _lock:
            if key not in _clients:
                original(self, options)
                # the client, and what else the constructor set as it left it (the state of one download)
                _clients[key] = (self.client, {k: copy.copy(v) for k, v in vars(self).items() if k != "client"})
                return
            client, initial = _clients[key]
        self.__dict__.update({k: copy.copy(v) for k, v in initial.items()})
        self.client = client

    __init__.__wrapped__ = original
    wrapper.__init__ = __init__
    _installed.add(id(wrapper))
    return True
