"""Whole elements on the local runner's data plane.

In `multi_threading` mode the FnApiRunner's in-process SDK workers flush their output streams on a
timer (`worker_handlers.DATA_BUFFER_TIME_LIMIT_MS`, 1 s) from a thread of their own, without the lock
the writer takes: an element whose encoding runs Python code (a pickled dataclass, a list of them)
long enough for the timer to fire is cut in two data messages. The runner decodes each message on
its own (`GroupingBuffer.append`, `WindowGroupingBuffer.append`), reads a length out of the middle
of the element and allocates it: 20,000 small files took 10-20 GB in seconds, or failed with a
decoding error, depending on where the timer fell (Beam issues #21104, #23944). Subprocess workers
(`multi_processing`) flush by size only, between elements, and so do these with the timer pushed
past any run.

`side_input_sizes_without_module_scan` is the other in-process workaround: Beam's state cache weighs
every side input it caches with `objsize`, which by default first walks `vars()` of every module in
`sys.modules` to exclude their globals; in a process that has imported torch that walk aborted the
interpreter (SIGABRT, seen once in the suite's in-process runs). Our side inputs are plain data that
no module global refers to, so they are weighed without that walk.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

# A day: the timer never fires in a batch run; streams flush when full and at the end of a bundle.
NO_TIMED_FLUSH_MS = 24 * 3600 * 1000


@contextlib.contextmanager
def whole_element_flushes() -> Iterator[None]:
    """For a pipeline started inside: local SDK worker threads flush between elements only."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    before = worker_handlers.DATA_BUFFER_TIME_LIMIT_MS
    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = max(before, NO_TIMED_FLUSH_MS)
    try:
        yield
    finally:
        worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = before


@contextlib.contextmanager
def side_input_sizes_without_module_scan() -> Iterator[None]:
    """For a pipeline started inside: Beam's state cache weighs side inputs without walking every
    module's globals (objsize's `exclude_modules_globals`). Where objsize has no such setting, or Beam
    weighs otherwise, nothing changes."""
    import objsize
    from apache_beam.runners.worker import statecache

    weigh = getattr(statecache, "get_deep_size", None)
    if weigh is None or "exclude_modules_globals" not in inspect.signature(objsize.get_deep_size).parameters:
        yield
        return

    def without_module_scan(*objs):
        return objsize.get_deep_size(*objs, get_size_func=statecache._size_func,
                                     get_referents_func=statecache._get_referents_func,
                                     filter_func=statecache._filter_func, exclude_modules_globals=False)

    statecache.get_deep_size = without_module_scan
    try:
        yield
    finally:
        statecache.get_deep_size = weigh
