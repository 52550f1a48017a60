"""Fallback spans: the stretches of a text a tokenizer kernel leaves to the real tokenizer.

A kernel that meets what its tables cannot vouch for drops the ids of the chunk it was in and
records the chunk as a span (byte start, byte stop, position in the output where its ids belong);
the caller encodes each span as a text of its own with the real tokenizer and splices its ids in.
A chunk that follows a span with only whitespace between them extends that span.
"""

from __future__ import annotations

from pipeline.kernels.common.jit import kernel


@kernel(inline="always")
def add_span(spans, n_spans, extend, start, stop, at):
    """Record text[start:stop] (ids at position `at` of the output) in spans (int64, (k, 3)) after its
    first n_spans rows: as the last span's new stop when `extend`, else as a span of its own;
    returns the number of spans."""
    if extend:
        spans[n_spans - 1, 1] = stop
        return n_spans
    spans[n_spans, 0] = start
    spans[n_spans, 1] = stop
    spans[n_spans, 2] = at
    return n_spans + 1
