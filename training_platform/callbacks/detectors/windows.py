"""The rolling windows behind the detectors: cheap on the quiet path.

Each keeps a detector's recent values and the statistics its rule compares
a new value with (a median, a level and noise, two windows' sums), and is
built to answer "is this value unusual?" for a healthy value without
sorting: the detectors run on every record a trainer logs, and a sort per
record and loss was most of their cost. Each answers exactly what a
re-sort on a fixed schedule (every `size // 10` values) would; only the
work is skipped when the answer cannot depend on it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from itertools import islice, repeat
from operator import sub
from typing import Final

# 1.4826 x the median absolute deviation estimates a Gaussian's sigma.
MAD_TO_SIGMA: Final = 1.4826


def median_of(values: list[float]) -> float:
    """The middle value of `values` sorted (the upper of the two for an even count)."""
    return sorted(values)[len(values) // 2]


def level_and_noise(values: Iterable[float]) -> tuple[float, float]:
    """(median, 1.4826 x median absolute deviation): a robust level and sigma."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    level = ordered[middle]
    # map/sub in C: faster than a comprehension (docs/benchmarks.md, Callback).
    spread = sorted(map(abs, map(sub, ordered, repeat(level))))[middle]
    return level, MAD_TO_SIGMA * spread


class RecentMedian:
    """The last `size` values, and their median as of every `size // 10`-th
    append once `known` values are in: the median of 50 steps barely moves in
    5, and sorting per step would be the most expensive thing the detectors do.

    The rules ask whether a value is above `factor` x that median. The median
    is only sorted out when that might be so: at the scheduled points the
    window is not even copied (`values` keeps `size // 10` values more than
    the window, so the window as of the last point is still in it), and
    `quiet_below` is set from the last sort (adding `b` values moves an
    order statistic down by at most `b` ranks): a value at most that is
    settled with one comparison.
    """

    __slots__ = (
        "_every", "_factor", "_known", "_median", "_size", "_snapshot_at", "_snapshot_size",
        "_sorted", "_sorted_at", "appends", "due_at", "quiet_below", "values",
    )  # fmt: skip

    def __init__(self, size: int, known: int, factor: float) -> None:
        self._size = size
        self._every = max(1, size // 10)
        # The window (the newest `size`) and the values appended since the
        # last point that pushed older ones out of it (fewer than `_every`).
        self.values: deque[float] = deque(maxlen=size + self._every)
        self._known = known
        self._factor = factor
        # The next point is due once `appends` reaches `due_at` (the first
        # right away, once `known` values are in): one counter and one
        # comparison per append, which the fused quiet path inlines.
        self.appends = 0
        self.due_at = 0
        self._snapshot_at = 0  # `appends` at the last point ...
        self._snapshot_size = 0  # ... and the window's length then
        self._median: float | None = None
        self._sorted: list[float] = []  # the last snapshot sorted ...
        self._sorted_at = 0  # ... and `appends` when that one was taken
        self.quiet_below = -math.inf
        """A value at most this is not above `factor` x the median."""

    def __len__(self) -> int:
        """How many values the window holds (at most `size`)."""
        return min(len(self.values), self._size)

    def append(self, value: float) -> None:
        self.values.append(value)
        appends = self.appends = self.appends + 1
        if appends >= self.due_at:
            self.take_point()

    def take_point(self) -> None:
        """The scheduled point, due after an append, once `known` values are in.

        The window `median()` answers for until the next point: the same
        schedule as a sort on every `every`-th call, whoever asks when.
        """
        size = min(len(self.values), self._size)
        if size < self._known:
            return  # still due: the point is taken at the append that makes `known`
        self._snapshot_size = size
        self._snapshot_at = appends = self.appends
        self._median = None
        self.due_at = appends + self._every
        # The window now is the sorted one plus `added` values (less some):
        # its middle value is at least the sorted one's (middle - added)-th.
        rank = size // 2 - (appends - self._sorted_at)
        self._set_quiet_below(self._sorted[rank] if rank >= 0 and self._sorted else None)

    def _set_quiet_below(self, lower: float | None) -> None:
        bound = self._factor * lower if lower is not None and self._factor >= 0.0 else -math.inf
        self.quiet_below = bound if bound == bound else -math.inf  # NaN: no bound

    def median(self) -> float:
        """The median as of the last scheduled point (once `known` values are in)."""
        median = self._median
        if median is None:
            # The window as of the last point: the newest values but those
            # appended since (fewer than `_every`, all still in `values`).
            end = len(self.values) - (self.appends - self._snapshot_at)
            window = islice(self.values, end - self._snapshot_size, end)
            ordered = self._sorted = sorted(window)
            self._sorted_at = self._snapshot_at
            median = self._median = ordered[len(ordered) // 2]
            self._set_quiet_below(median)
        return median

    def exceeds(self, value: float) -> bool:
        """Whether `value > factor * median()`; sorts unless `quiet_below` settles it."""
        return value > self.quiet_below and value > self._factor * self.median()


class TwoWindowSums:
    """Sums of the last `size` (reward, kl, length) triples and of the `size`
    before them, O(1) per step. One deque of triples for the three series
    and both windows (the older is its first `size` once full): a triple
    moves between the windows by index, and a step is one call, not three."""

    __slots__ = ("_count", "new", "old", "size", "values")

    def __init__(self, size: int) -> None:
        self.size = size
        self.values: deque[tuple[float, float, float]] = deque(maxlen=2 * size)
        self.new = self.old = (0.0, 0.0, 0.0)  # the windows' sums (reward, kl, length)
        self._count = 0

    def push(self, reward: float, kl: float, length: float) -> bool:
        """Add a step; whether both windows are full."""
        values = self.values
        size = self.size
        filled = len(values)
        if filled == 2 * size and self._count % 1024 != 1023:
            # Full, and no re-add due: the steps below in two expressions
            # per sum, each in the same order (the same floats).
            moved_r, moved_k, moved_n = values[size]
            gone_r, gone_k, gone_n = values[0]
            new_r, new_k, new_n = self.new
            old_r, old_k, old_n = self.old
            self.old = old_r + moved_r - gone_r, old_k + moved_k - gone_k, old_n + moved_n - gone_n
            self.new = new_r + reward - moved_r, new_k + kl - moved_k, new_n + length - moved_n
            values.append((reward, kl, length))
            self._count += 1
            return True
        new_r, new_k, new_n = self.new
        # Each sum changes in the order a pair of deques per series changed it
        # (add, move across, drop the oldest): the same floats to the last bit.
        new_r += reward
        new_k += kl
        new_n += length
        if filled >= size:
            moved_r, moved_k, moved_n = values[filled - size]  # newer -> older window
            new_r -= moved_r
            new_k -= moved_k
            new_n -= moved_n
            old_r, old_k, old_n = self.old
            old_r += moved_r
            old_k += moved_k
            old_n += moved_n
            if filled == 2 * size:  # the append below drops the oldest
                gone_r, gone_k, gone_n = values[0]
                old_r -= gone_r
                old_k -= gone_k
                old_n -= gone_n
            self.old = old_r, old_k, old_n
        values.append((reward, kl, length))
        self.new = new_r, new_k, new_n
        self._count += 1
        if self._count % 1024 == 0:  # re-add now and then: running sums drift
            older = max(0, len(values) - size)
            self.new = _column_sums(islice(values, older, None))
            self.old = _column_sums(islice(values, 0, older))
        return len(values) == 2 * size


def _column_sums(rows: Iterable[tuple[float, float, float]]) -> tuple[float, float, float]:
    columns = list(zip(*rows, strict=True))
    if not columns:
        return 0.0, 0.0, 0.0
    return sum(columns[0]), sum(columns[1]), sum(columns[2])


class SpikeScale:
    """One loss's last `size` values for the spike rule, with its level (the
    median of the newest `recent`) and noise (1.4826 x MAD of all) as of
    every `size // 10`-th append once `known` values are in: they barely move
    in between.

    The level is cheap (a sort of `recent` values) and kept current; the
    noise (two sorts of `size`) is worked out from the window as of the last
    refresh only when a value is big enough that it could matter: a positive
    loss is judged by its level alone, and a zero-centred one needs its
    noise for a fraction of the windows. The window is not copied at a
    refresh: `values` keeps `every` values more than the window, so it still
    holds the window as of the last refresh (`stale` values back).
    """

    __slots__ = (
        "_known", "_noise", "_recent", "_size", "every", "level", "quiet_below", "seen",
        "stale", "values",
    )  # fmt: skip

    def __init__(self, size: int, recent: int, known: int) -> None:
        self._size = size
        self._recent = min(recent, size)
        self._known = known
        self.every = max(1, size // 10)
        self.values: deque[float] = deque(maxlen=size + self.every)
        self.stale = self.every  # appends since the last refresh
        self.seen = 0  # finite values observed, spikes and warm-up included
        self.level = 0.0
        self.quiet_below = math.inf
        """Set by `LossSpikeDetector`: a value whose magnitude is below this is no spike."""
        self._noise: float | None = None

    def __len__(self) -> int:
        """How many values the window holds (at most `size`)."""
        return min(len(self.values), self._size)

    def append(self, value: float) -> None:
        self.values.append(value)
        self.stale += 1
        # The same schedule as a refresh on every `every`-th check: the window
        # does not change between this append and the next check.
        if self.stale >= self.every:
            self.refresh()

    def refresh(self) -> None:
        """Take the level (and mark the window as of now), once `known` values are in."""
        values = self.values
        if min(len(values), self._size) >= self._known:
            self.stale = 0
            newest = sorted(islice(values, max(0, len(values) - self._recent), None))
            self.level = newest[len(newest) // 2]
            self._noise = None

    def noise(self) -> float:
        """1.4826 x the MAD of the window as of the last scheduled point."""
        noise = self._noise
        if noise is None:
            # The window as of the last refresh: all but the newest `stale`.
            end = len(self.values) - self.stale
            window = islice(self.values, max(0, end - self._size), end)
            noise = self._noise = level_and_noise(window)[1]
        return noise
