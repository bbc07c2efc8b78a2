"""Smoothed lines for comparison charts, honest about what they were computed from.

Two methods (docs/contract.md, compare): an exponential moving average
``s = w*s + (1-w)*v``, debiased at the start as TensorBoard does (divided by
``1 - w**n`` after n values, so the first points are not dragged towards 0),
and the mean of the last `window` values. Non-finite values are skipped.

`ExactSmoother` runs over every record of the range (step order) and reads
its state at each point's last step. `smooth_buckets` runs over the buckets
when the records are too many to read: a bucket counts as its step span's
worth of values at its mean, which is exact for a bucket of equal values and
close when values vary little within a bucket; the min/max band drawn behind
the line stays the exact envelope either way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from training_platform.history.series.buckets import finite_time

Method = Literal["ema", "window"]


@dataclass(frozen=True)
class Smoothing:
    method: Method
    weight: float = 0.0  # ema: 0 <= w < 1
    window: int = 1  # window: values averaged

    def describe(self) -> dict[str, float | int | str]:
        if self.method == "ema":
            return {"method": "ema", "weight": self.weight}
        return {"method": "window", "window": self.window}


class ExactSmoother:
    """One series' smoothed value, fed its exact values in step order."""

    def __init__(self, smoothing: Smoothing) -> None:
        self.smoothing = smoothing
        self._last = 0.0
        self._count = 0
        self._window: deque[float] = deque(maxlen=max(1, smoothing.window))
        self._sum = 0.0

    def add(self, value: object) -> None:
        number = finite_time(value)
        if number is None:
            return
        self._count += 1
        if self.smoothing.method == "ema":
            w = self.smoothing.weight
            self._last = self._last * w + (1 - w) * number
            return
        if len(self._window) == self._window.maxlen:
            self._sum -= self._window[0]
        self._window.append(number)
        self._sum += number

    @property
    def value(self) -> float | None:
        if self._count == 0:
            return None
        if self.smoothing.method == "ema":
            debias = 1 - self.smoothing.weight**self._count
            return self._last / debias if debias > 0 else self._last
        return self._sum / len(self._window)


def smooth_buckets(
    means: Sequence[float | None],
    spans: Sequence[int],
    smoothing: Smoothing,
) -> list[float | None]:
    """The smoothed line at each bucket's end, a bucket weighing its `spans` steps at its mean."""
    out: list[float | None] = []
    if smoothing.method == "ema":
        w, last, count = smoothing.weight, 0.0, 0
        for mean, span in zip(means, spans, strict=True):
            if mean is not None and math.isfinite(mean):
                decay = w ** max(span, 1)
                last = last * decay + (1 - decay) * mean
                count += max(span, 1)
            debias = 1 - w**count
            out.append(None if count == 0 else (last / debias if debias > 0 else last))
        return out
    held: deque[tuple[float, int]] = deque()  # (mean, steps) of the buckets in the window
    for mean, span in zip(means, spans, strict=True):
        if mean is not None and math.isfinite(mean):
            held.append((mean, max(span, 1)))
        total = weight = 0.0
        room = smoothing.window
        for value, steps in reversed(held):
            if room <= 0:
                break
            take = min(steps, room)
            total += value * take
            weight += take
            room -= take
        while len(held) > 1 and sum(steps for _, steps in held) - held[0][1] >= smoothing.window:
            held.popleft()  # no longer reached by the window
        out.append(total / weight if weight else None)
    return out
