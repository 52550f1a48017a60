"""Beam's `PipelineOptions.view_as`, memoized while a job's graph is built and run.

Beam asks its options for a view (`options.view_as(TypeOptions)`) at every transform it applies,
every type-consistency check and every stage it translates: ~600-900 times for the preprocess
graph, and each view builds an argparse parser and parses the flags again (~0.5-0.9 ms): 0.4-0.8
CPU-seconds of every job's start. A view holds no state of its own: every option value lives in
the `_all_options` dict that all views of one options object share, and what a view shows depends
only on its class and on the flags it parses (also shared). So one view per (shared values,
flags, class) is the same view, and while `memoized_option_views` is active `view_as` returns it.
Only a reviewed `view_as` (by the sha256 of its source) is replaced; restored when the last job
using it leaves.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import threading

from apache_beam.options.pipeline_options import PipelineOptions

# sha256 of `inspect.getsource(PipelineOptions.view_as)` and of `PipelineOptions.__init__` of the
# Beam releases read: a view is `cls(self._flags)` whose unset option values are copied into, and
# then shared through, `self._all_options`; `__init__` keeps nothing else.
REVIEWED = {
    ("3fd63693be9c56f3f335a2828c98595036835564dc3c0db838fbae11e408ef0f",
     "d51172d3bd0f03ebb18bd27b35443d3f2a76793c045e58cec8d083b32f0bc0ed"): "apache-beam 2.77",
}
_log = logging.getLogger("maskbeam.runner")
_lock = threading.Lock()
_users = [0]
_views: dict[tuple[int, int, type], PipelineOptions] = {}  # each view keeps its key's objects alive
_original = PipelineOptions.view_as


def _digests() -> tuple[str | None, str | None]:
    def digest(function) -> str | None:
        try:
            return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
        except (OSError, TypeError):
            return None
    return digest(_original), digest(PipelineOptions.__init__)


def _view_as(self: PipelineOptions, cls: type) -> PipelineOptions:
    flags = self._flags
    key = (id(self._all_options), id(flags), cls)
    view = _views.get(key)
    if view is None or view._all_options is not self._all_options or view._flags is not flags:
        view = _views[key] = _original(self, cls)
    return view


@contextlib.contextmanager
def memoized_option_views():
    """While active, `PipelineOptions.view_as` returns one view per options values, flags and class
    (see the module docstring); a Beam release whose `view_as` was not reviewed is left as it is."""
    with _lock:
        if _users[0] == 0:
            if _digests() in REVIEWED:
                PipelineOptions.view_as = _view_as
            else:
                _log.debug("Beam's PipelineOptions.view_as (sha256 %s, __init__ %s) is not one MaskBeam reviewed: "
                           "left as it is (each view parses the flags again)", *_digests())
        _users[0] += 1
    try:
        yield
    finally:
        with _lock:
            _users[0] -= 1
            if _users[0] == 0:
                PipelineOptions.view_as = _original
                _views.clear()
