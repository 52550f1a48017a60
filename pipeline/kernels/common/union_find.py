"""Connected components over integer ids: a union-find whose root is always the smallest id of its
component, whatever the order of the edges (the near-duplicate clusters' rule: the earliest path of
a cluster is kept, and the ids are the members' ranks by path).

The arrays may be memory maps of files (the cluster step keeps them on local disk): the kernels
touch them in place and allocate nothing.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.common.jit import kernel


@kernel()
def union_smallest(parent, ends):
    """Join the two ends of each edge (`ends`: uint32, (edges, 2)) in `parent` (uint32, one a id,
    parent[i] <= i, each its own id at first): the root of a component is its smallest id."""
    for e in range(ends.shape[0]):
        a = ends[e, 0]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        b = ends[e, 1]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b


@kernel()
def flatten_roots(parent):
    """Point every id of `parent` at its component's root: one pass in id order suffices, as a
    parent is never after its child (parent[i] <= i) and is already flattened when its child is."""
    for i in range(parent.shape[0]):
        parent[i] = parent[parent[i]]


def smallest_roots(parent: np.ndarray, ends: np.ndarray) -> None:
    """`parent` (ids 0..n-1 set to themselves) -> each id's root, the smallest id of its component
    joined by the edges `ends` ((edges, 2) of ids)."""
    if len(ends):
        union_smallest(parent, ends)
    if len(parent):
        flatten_roots(parent)
