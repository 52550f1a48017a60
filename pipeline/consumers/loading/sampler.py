"""A deterministic, rank-disjoint, elastically resumable order of dataset indices, optionally
window by window over the shards of a split larger than its cache (`ShardWindows`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from torch.utils.data import Sampler


class Windows(Protocol):
    """What the sampler tells the cache that holds a split's windows (`ShardWindows`)."""

    def enter(self, current: list[int], upcoming: list[int], behind: list[int] = ...) -> None: ...


def _count(value, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class ResumableSampler(Sampler[int]):
    """A deterministic, rank-disjoint, elastically resumable order of dataset indices.

    The global sample stream of epoch e is a pure function of (seed, e): a permutation of the n rows.
    From a global position g, rank r of N ranks takes stream[g + r], stream[g + r + N], ...; the tail
    is padded to equal shares (as DistributedSampler: by wrapping to the stream's start; window by
    window: with rows of the last window, which is cached), so ranks step together. A saved state
    holds the global position (samples consumed by all ranks together), so a run saved on N ranks
    resumes on any N' ranks with exactly the samples an uninterrupted run would consume next.

    `position` counts this rank's samples consumed since the segment began. A DataLoader's workers
    prefetch ahead of what the training loop has consumed, so the sampler cannot count consumption
    itself: `ResumableLoader` advances it batch by batch as batches reach the loop (or call
    `advance(k)` yourself). `state_dict()` in the middle of an epoch that nobody counted raises
    instead of silently replaying the epoch.

    An iteration that starts after the current epoch was consumed (counted to its end, or handed out
    whole by an iterator nobody counted) starts the next epoch, so a plain `for epoch ...: for batch
    in loader` loop without `set_epoch` trains on every epoch, each in its own order; `len()` is
    always the number of indices the next iteration yields.

    Window by window (`window_shards` > 0 with `shard_rows`): shards are shuffled and grouped k at a
    time and rows shuffled within each window; `windows.enter(current, upcoming, behind)` (or the
    older `on_window` callback) is called as each window starts, before its first row.
    """

    def __init__(self, n: int, *, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 tag_epoch: bool = False, shard_rows: list[int] | None = None, window_shards: int = 0,
                 on_window: Callable[[list[int], list[int], list[int]], None] | None = None,
                 windows: Windows | None = None) -> None:
        world_size = _count(world_size, "world_size", 1)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        n = _count(n, "the number of rows to sample from", 1)
        window_shards = _count(window_shards, "window_shards", 0)
        rows = [_count(r, "rows of a shard", 0) for r in shard_rows or []]
        if window_shards and sum(rows) != n:
            raise ValueError(f"window_shards needs shard_rows, the rows of every shard, summing to n={n} "
                             f"(got {sum(rows)})")
        self.n, self.seed, self.rank, self.world_size, self.shuffle = n, seed, rank, world_size, shuffle
        self.tag_epoch = tag_epoch  # yield epoch * n + index (see MlmShardDataset)
        self.shard_rows = rows
        self.window_shards = window_shards if shuffle else 0
        # told on entering a window: its shards, the next window's and those of earlier windows whose rows
        # are not all consumed yet
        self.on_window = windows.enter if windows is not None else on_window
        self._resumed_layout: tuple[int, int, list[int]] | None = None  # (epoch, window_shards, shard_rows)
        self.epoch = 0
        self.base = 0  # global stream position where this segment of the epoch began (0, or a resumed one)
        self.position = 0
        self._yielded = 0  # indices handed out by the current iterator
        self._counted = False  # whether consumption was reported (advance) since the iterator started
        self._handed_out = False  # an iterator handed out the whole segment (consumed or not)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning; the current epoch (a resumed one) is left as it is."""
        if epoch != self.epoch:
            self.epoch, self.base, self.position = epoch, 0, 0
            self._handed_out = False

    def _layout(self, epoch: int) -> tuple[int, list[int]]:
        """The window size and shard rows of `epoch`'s order: this sampler's own, except for an epoch
        resumed from a state saved with another layout, which keeps the saved one to its end."""
        if self._resumed_layout is not None and self._resumed_layout[0] == epoch:
            return self._resumed_layout[1], self._resumed_layout[2]
        return self.window_shards, self.shard_rows

    def windows(self, epoch: int) -> list[list[int]]:
        """The shards of each window of `epoch`, in reading order (windowed sampling only)."""
        k, shard_rows = self._layout(epoch)
        shards = np.random.Generator(np.random.PCG64([self.seed, epoch, 1])).permutation(len(shard_rows))
        return [shards[i: i + k].tolist() for i in range(0, len(shards), k)]

    def _epoch_order(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The permutation of the n rows for this epoch, and (windowed) the window of each position.

        Windowed: shards are shuffled and grouped k at a time; rows are shuffled within each window,
        so a reader needs only a window's shards at a time. Both are functions of (seed, epoch)."""
        if not self.shuffle:
            return np.arange(self.n), None
        k, shard_rows = self._layout(self.epoch)
        if not k:
            return np.random.Generator(np.random.PCG64([self.seed, self.epoch])).permutation(self.n), None
        offsets = np.cumsum([0, *shard_rows])
        rows, windows = [], []
        for w, shards in enumerate(self.windows(self.epoch)):
            ids = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in shards])
            rows.append(ids[np.random.Generator(np.random.PCG64([self.seed, self.epoch, 2, w])).permutation(ids.size)])
            windows.append(np.full(ids.size, w))
        return np.concatenate(rows), np.concatenate(windows)

    def _padded(self, values: np.ndarray, windows: np.ndarray | None = None) -> np.ndarray:
        """`values` padded to the segment's equal shares: by wrapping to the start (as
        DistributedSampler); window by window (`windows` given), with the last window's values,
        so no rank re-enters a window it finished (and downloads it again) at the epoch's end."""
        size = self.base + self._segment_len() * self.world_size
        if windows is None:
            return np.resize(values, size)
        last = int(np.searchsorted(windows, windows[-1]))  # first position of the last window
        tail = values[max(last, self.base):]
        return np.concatenate([values, np.resize(tail, size - values.size)])

    def _segment_len(self) -> int:
        return -(-(self.n - self.base) // self.world_size)

    def _roll_if_done(self) -> None:
        """The current segment was consumed: the next epoch starts."""
        if self.position >= self._segment_len() or (self._handed_out and not self._counted):
            self.epoch, self.base, self.position = self.epoch + 1, 0, 0
            self._handed_out = self._counted = False

    def stream(self) -> np.ndarray:
        """The global order of this epoch from `base`, padded to a multiple of world_size."""
        order, windows = self._epoch_order()
        return self._padded(order, windows)

    def order(self) -> np.ndarray:
        """This rank's indices of the current segment."""
        return self.stream()[self.base + self.rank :: self.world_size]

    def __len__(self) -> int:
        """The number of indices the next iteration yields (what is left of the current segment, or
        the whole next epoch once the segment was consumed)."""
        if self.position >= self._segment_len() or (self._handed_out and not self._counted):
            return -(-self.n // self.world_size)  # the next epoch, whole
        return self._segment_len() - self.position

    def __iter__(self):
        self._roll_if_done()
        order, windows = self._epoch_order()
        mine = slice(self.base + self.rank, None, self.world_size)
        order = self._padded(order, windows)[mine][self.position :]
        self._yielded, self._counted, self._handed_out = 0, False, False
        values = (order + self.epoch * self.n if self.tag_epoch else order).tolist()
        if windows is None or self.on_window is None:
            for value in values:
                self._yielded += 1
                yield value
            self._handed_out = True
            return
        window_of = self._padded(windows, windows)[mine][self.position :].tolist()
        plan = self.windows(self.epoch)
        current, start = -1, self.position
        for value, window in zip(values, window_of):
            if window != current:
                current = window
                upcoming = plan[window + 1] if window + 1 < len(plan) else self.windows(self.epoch + 1)[0]
                # DataLoader workers still gather rows handed out before: the windows from the oldest
                # row not yet consumed (known when ResumableLoader counts consumption) stay cached.
                oldest = window_of[min(self.position - start, len(window_of) - 1)] if self._counted else window
                self.on_window(plan[window], upcoming, [i for w in range(oldest, window) for i in plan[w]])
            self._yielded += 1
            yield value
        self._handed_out = True

    def advance(self, k: int) -> None:
        """`k` more of this rank's samples reached the training loop."""
        self.position += k
        self._counted = True

    def complete(self) -> None:
        """The current segment was consumed to its end (what a DataLoader with `drop_last` dropped
        included): the next iteration starts the next epoch."""
        self.position = max(self.position, self._segment_len())
        self._counted = True

    @property
    def global_position(self) -> int:
        return min(self.base + self.position * self.world_size, self.n)

    def state_dict(self) -> dict:
        if self._yielded and not self._counted and self.position < self._segment_len():
            raise RuntimeError("ResumableSampler.state_dict() in the middle of an epoch whose consumption nobody "
                               "counted: iterate through ResumableLoader (or call sampler.advance(batch_rows) per "
                               "batch), else a resumed run would replay or skip samples")
        k, shard_rows = self._layout(self.epoch)
        return {"epoch": self.epoch, "global_position": self.global_position, "position": self.position,
                "seed": self.seed, "n": self.n, "world_size": self.world_size, "shuffle": self.shuffle,
                "window_shards": k, "shard_rows": list(shard_rows) if k else []}

    def load_state_dict(self, state: dict) -> None:
        """Resume where `state` was saved, on this sampler's own world size (which may differ).

        The order also depends on the layout (shuffle, and windows of `window_shards` shards when the
        split comes through a cache smaller than itself). Saved with another layout, the resumed epoch
        keeps the saved order to its end, so no row is lost or repeated, and the next epoch takes this
        sampler's layout; refused when this sampler's cache could not hold that order (windows larger
        than its own, or no windows at all).

        Raises:
            ValueError: another seed, number of rows, shuffle or shards, or a layout this sampler's
                cache cannot read.
        """
        if state["seed"] != self.seed or state.get("n", self.n) != self.n:
            raise ValueError(f"sampler state is for seed {state['seed']} and {state.get('n')} rows, "
                             f"not {self.seed} and {self.n}")
        if state.get("shuffle", self.shuffle) != self.shuffle:
            raise ValueError(f"sampler state is for shuffle={state['shuffle']}, this sampler has "
                             f"shuffle={self.shuffle}: resume with the same setting")
        global_position = state.get("global_position", state["position"] * state["world_size"])
        saved_k, saved_rows = state.get("window_shards", self.window_shards), state.get("shard_rows", self.shard_rows)
        self._resumed_layout = None
        if global_position >= self.n:  # the saved epoch was complete: the next one starts
            self.epoch, self.base, self.position = state["epoch"] + 1, 0, 0
        else:
            self.epoch, self.base, self.position = state["epoch"], global_position, 0
            if global_position and (saved_k, list(saved_rows) if saved_k else []) != (
                    self.window_shards, self.shard_rows if self.window_shards else []):
                self._check_layout(saved_k, list(saved_rows), global_position)
                self._resumed_layout = (self.epoch, saved_k, list(saved_rows))
        self._yielded, self._counted, self._handed_out = 0, False, False

    def _check_layout(self, saved_k: int, saved_rows: list[int], global_position: int) -> None:
        """Whether this sampler can finish an epoch begun in windows of `saved_k` shards (0: none)."""
        where = f"the checkpoint stopped {global_position} of {self.n} rows into epoch {self.epoch}"
        if saved_k and sum(saved_rows) != self.n:
            raise ValueError(f"{where}, reading {len(saved_rows)} shards of {sum(saved_rows)} rows; this split has "
                             f"{self.n} rows: resume on the same data")
        if saved_k and self.shard_rows and saved_rows != self.shard_rows:
            raise ValueError(f"{where} reading shards of other sizes than this split's: resume on the same data")
        if not self.window_shards:
            return  # every row is at hand: the saved order is read as it is
        if not saved_k:
            raise ValueError(f"{where} in an order over the whole split, which this run's shard cache (windows of "
                             f"{self.window_shards} shards) cannot hold: resume without --cache_limit (or one that "
                             "holds the whole split), or from a checkpoint at an epoch's end")
        if saved_k > self.window_shards:
            raise ValueError(f"{where} reading windows of {saved_k} shards; this run's shard cache holds "
                             f"{self.window_shards}: resume with the earlier --cache_limit (or a larger one, or "
                             "none)")
