"""`stage_times.json`'s run-long parts beyond the stage times: memory history and the device.

`MemoryHistory` follows the memory figures of sampled steps (mean, peak, a
trend line, the leaks reported); `device_info` says what ran the steps.
Neither imports torch.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections import deque
from typing import Any

from training_platform.callbacks.profiling.memory import GIB, MIB
from training_platform.callbacks.profiling.stats import linear_trend

logger = logging.getLogger(__name__)

# Memory figures of a record that the summary follows: "profiling/rss_gib",
# "profiling/cuda<i>/{allocated,reserved,peak}_gib" (not the growth rates).
_TRACKED_SUFFIXES = ("allocated_gib", "reserved_gib", "peak_gib", "rss_gib")
_TREND_WINDOW = 200  # samples fitted for the summary's trend line
_MAX_LEAKS = 20


class MemoryHistory:
    """Run-long mean and peak of each sampled memory figure, its recent trend, the leaks.

    Fed only on sampled steps (at most every `min_interval_s`), so its cost is
    off the per-step path. The trend is the least-squares line over the last
    `_TREND_WINDOW` samples of allocated CUDA memory and RSS: the line the
    dashboard draws, and the report's leak verdict beside the kit's anomalies.
    """

    def __init__(self) -> None:
        self.samples = 0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._peaks: dict[str, float] = {}
        self._recent: dict[str, deque[tuple[int, float]]] = {}
        self.leaks: deque[dict[str, Any]] = deque(maxlen=_MAX_LEAKS)

    def add(self, step: int, extra: dict[str, float], anomalies: list[dict[str, str]]) -> None:
        self.samples += 1
        for key, value in extra.items():
            name = _memory_name(key)
            if name is None:
                continue
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._counts[name] = self._counts.get(name, 0) + 1
            self._peaks[name] = max(self._peaks.get(name, value), value)
            if name == "rss_gib" or name.endswith("/allocated_gib"):
                recent = self._recent.get(name)
                if recent is None:
                    recent = self._recent[name] = deque(maxlen=_TREND_WINDOW)
                recent.append((step, value))
        for anomaly in anomalies:
            self.leaks.append({"step": step, **anomaly})

    def summary(self) -> dict[str, Any]:
        means = {name: total / self._counts[name] for name, total in self._sums.items()}
        return {
            "samples": self.samples,
            "peak": _nested(self._peaks),
            "mean": _nested(means),
            "trend": {name: fit for name, points in self._recent.items() if (fit := _fit(points))},
            "leaks": list(self.leaks),
        }


def _memory_name(key: str) -> str | None:
    """``profiling/cuda0/allocated_gib`` -> ``cuda:0/allocated_gib``; ``rss_gib``; else None."""
    if not key.startswith("profiling/") or not key.endswith(_TRACKED_SUFFIXES):
        return None
    parts = key.split("/")
    if len(parts) == 2:
        return parts[1] if parts[1] == "rss_gib" else None
    if len(parts) == 3 and parts[1].startswith("cuda") and parts[1][4:].isdigit():
        return f"cuda:{parts[1][4:]}/{parts[2]}"
    return None


def _nested(flat: dict[str, float]) -> dict[str, Any]:
    """``{"cuda:0/peak_gib": x, "rss_gib": y}`` -> ``{"cuda:0": {"peak_gib": x}, "rss_gib": y}``."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        device, _, figure = name.partition("/")
        if figure:
            out.setdefault(device, {})[figure] = value
        else:
            out[name] = value
    return out


def _fit(points: deque[tuple[int, float]]) -> dict[str, float] | None:
    if len(points) < 3 or points[0][0] == points[-1][0]:
        return None
    steps = [float(step) for step, _ in points]
    values = [value * GIB / MIB for _, value in points]  # MiB, as the leak detector fits
    slope, r_squared = linear_trend(values, steps)
    mean_step = sum(steps) / len(steps)
    mean_mib = sum(values) / len(values)

    def at(step: float) -> float:
        return (mean_mib + slope * (step - mean_step)) * MIB / GIB

    return {
        "slope_mib_per_step": slope,
        "r_squared": r_squared,
        "from_step": steps[0],
        "to_step": steps[-1],
        "from_gib": at(steps[0]),
        "to_gib": at(steps[-1]),
        "samples": len(points),
    }


def device_info() -> dict[str, Any]:
    """What ran the steps: the current CUDA device once the process uses CUDA, else the CPU.

    Asks nothing of CUDA before the process initialised it (that would create
    a context on a GPU the trainer may not use), and never imports torch.
    """
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            index = cuda.current_device()
            props = cuda.get_device_properties(index)
            return {
                "type": "cuda",
                "name": props.name,
                "index": index,
                "count": cuda.device_count(),
                "total_gib": props.total_memory / GIB,
                "torch": str(version),
            }
    except Exception:  # a broken driver must not cost the summary
        logger.debug("profiling: CUDA device query failed", exc_info=True)
    return {
        "type": "cpu",
        "name": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": str(version) if version is not None else None,
    }
