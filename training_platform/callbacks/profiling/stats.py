"""Small descriptive statistics shared by the profiler, the trackers and the tools.

Pure Python (no numpy): it runs inside training processes that may not have it,
and the inputs are short (a window of steps, a few hundred latencies).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) of already sorted values, linearly interpolated.

    Same definition as numpy's default ("linear"), so figures match what a user
    gets from `numpy.percentile` on the same data. NaN for an empty sequence.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if n == 1:
        return float(sorted_values[0])
    position = (n - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, n - 1)
    fraction = position - low
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction)


def describe(values: Iterable[float]) -> dict[str, float]:
    """count, mean, std (population), min, max, p50 and p95 of the finite values.

    Non-finite values are left out (and not counted): one NaN loss must not turn
    a whole window's mean into NaN. An empty input gives count 0 and NaNs.
    """
    finite = sorted(v for v in values if math.isfinite(v))
    n = len(finite)
    if n == 0:
        nan = math.nan
        return {"count": 0, "mean": nan, "std": nan, "min": nan, "max": nan, "p50": nan, "p95": nan}
    mean = math.fsum(finite) / n
    variance = math.fsum((v - mean) ** 2 for v in finite) / n
    return {
        "count": n,
        "mean": mean,
        "std": math.sqrt(variance),
        "min": finite[0],
        "max": finite[-1],
        "p50": percentile(finite, 50),
        "p95": percentile(finite, 95),
    }


def linear_trend(values: Sequence[float], xs: Sequence[float] | None = None) -> tuple[float, float]:
    """Least-squares slope of `values` against `xs` (default 0, 1, ...), and the fit's R².

    R² is 0 when the values are all equal (a flat line explains nothing, and
    nothing needs explaining). Needs at least two distinct x. Plain sums over
    centred values: exact enough for memory in MiB, and cheap on the step path.
    """
    n = len(values)
    positions: Sequence[float] = range(n) if xs is None else xs
    if len(positions) != n:
        raise ValueError("xs needs one entry per value")
    if n < 2:
        raise ValueError("a trend needs at least two values")
    mean_x = sum(positions) / n
    mean_y = sum(values) / n
    sxx = sxy = syy = 0.0
    for x, y in zip(positions, values, strict=True):
        dx = x - mean_x
        dy = y - mean_y
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    if sxx == 0.0:
        raise ValueError("a trend needs at least two distinct x")
    slope = sxy / sxx
    r_squared = 0.0 if syy == 0.0 else (sxy * sxy) / (sxx * syy)
    return slope, r_squared


def finite_or_none(value: Any) -> Any:
    """`value` with every non-finite float inside dicts, lists and tuples made None.

    For files that browsers and other tools read: standard JSON has no NaN.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value
