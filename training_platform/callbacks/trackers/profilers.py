"""The profiling API of the Profiling & Metrics layer, on the kit's parts.

Code written against that layer's ``profiling`` module runs with its import
changed to this one (docs/metrics-api.md)::

    from training_platform.callbacks.trackers.profilers import ComprehensiveProfiler

    profiler = ComprehensiveProfiler(device=0)
    for batch in dataloader:
        profiler.start_iteration()
        ...
        profiler.end_iteration(num_samples=len(batch), num_tokens=batch_tokens)
    profiler.export_to_json("profiling_results.json")

The measurements are the kit's: memory from `MemoryMonitor.snapshot` (torch's
allocator per CUDA device, process RSS), trends from `LeakDetector`, timing
statistics from `StageStats` with `cuda_synchronizer`, rates from
`ThroughputMeter`. Without a GPU, memory is the process RSS and every result
says so. torch is imported only when a CUDA device is asked for.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from training_platform.callbacks.profiling.memory import GIB, LeakDetector, MemoryMonitor
from training_platform.callbacks.profiling.stage_timer import StageStats, cuda_synchronizer
from training_platform.callbacks.profiling.stats import describe
from training_platform.callbacks.profiling.step_profiler import ThroughputMeter
from training_platform.callbacks.trackers.metrics import write_json_atomic

__all__ = [
    "ComprehensiveProfiler",
    "GPUMemoryProfiler",
    "ThroughputTracker",
    "TrainingTimer",
    "resolve_cuda_index",
]

logger = logging.getLogger(__name__)
Device = int | str | None
_warned: set[Any] = set()


def resolve_cuda_index(device: Any) -> tuple[int | None, str]:
    """(CUDA device index, or None for the CPU; what memory figures mean there).

    ``0``, ``"cuda"``, ``"cuda:1"`` or a ``torch.device`` ask for a GPU;
    ``None`` or ``"cpu"`` for the CPU. Without a GPU the CPU is used and the
    note says so; an index this machine does not have is a `ValueError`.
    """
    text = str(device) if device is not None else "cpu"
    if text == "cpu":
        return None, "process RSS (CPU)"
    if text.isdigit():
        index = int(text)
    elif text == "cuda" or text.startswith("cuda:"):
        index = int(text.partition(":")[2] or 0)
    else:
        raise ValueError(f"device {device!r}: use an index, 'cuda', 'cuda:N' or 'cpu'")
    try:
        import torch
    except ImportError:
        return None, "process RSS (torch is not installed, no GPU measured)"
    if not torch.cuda.is_available():
        if device not in _warned:  # once per device asked for, not once per profiler part
            _warned.add(device)
            logger.warning("device %r asked for, no CUDA GPU available: measuring the CPU", device)
        return None, "process RSS (no CUDA GPU available)"
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device cuda:{index} does not exist: this machine has {count} GPU(s)")
    return index, f"torch.cuda allocator, cuda:{index}"


class GPUMemoryProfiler:
    """Memory at named points: ``measure(tag)``, a baseline, and leak checks.

    Figures in GB (2**30 bytes): ``allocated_gb``, ``reserved_gb``,
    ``max_allocated_gb``, ``max_reserved_gb`` (peaks since the process
    started, as torch counts them), plus ``source``. On the CPU all four are
    the process RSS (the maxima: the largest RSS measured). Measurements are
    kept by tag (the last `history_size` each). Two leak checks:
    `detect_leak(threshold_gb)` (allocated now against `set_baseline()`) and
    the kit's trend detector over successive measurements (`trend_leaks`).
    """

    def __init__(
        self,
        device: Device = 0,
        *,
        history_size: int = 10_000,
        leak_window: int = 50,
        leak_min_growth_mib: float = 64.0,
    ) -> None:
        self.device = device
        self.cuda_index, self.source = resolve_cuda_index(device)
        self._monitor = MemoryMonitor(track_rss=self.cuda_index is None)
        self._history_size = history_size
        self.history: dict[str, deque[dict[str, Any]]] = {}
        self.baseline_gb: float | None = None
        self.trend_leaks: list[dict[str, str]] = []
        self._trend = LeakDetector(
            f"{self.source} allocated memory",
            window=leak_window,
            min_growth_mib=leak_min_growth_mib,
            warmup_steps=0,
        )
        self._count = 0
        self._allocated_sum = 0.0
        self._peak = {"allocated_gb": 0.0, "reserved_gb": 0.0}
        self._max_rss = 0

    def read(self) -> dict[str, Any]:
        """Memory now, recorded nowhere."""
        snap = self._monitor.snapshot()
        if self.cuda_index is None:
            rss = snap.rss or 0
            self._max_rss = max(self._max_rss, rss)
            now, peak = rss / GIB, self._max_rss / GIB
            figures = {"allocated_gb": now, "reserved_gb": now}
            figures.update(max_allocated_gb=peak, max_reserved_gb=peak)
        else:
            dev = next((d for d in snap.devices if d.index == self.cuda_index), None)
            figures = {
                "allocated_gb": dev.allocated / GIB if dev else 0.0,
                "reserved_gb": dev.reserved / GIB if dev else 0.0,
                "max_allocated_gb": dev.peak / GIB if dev else 0.0,
                "max_reserved_gb": (dev.peak_reserved or 0) / GIB if dev else 0.0,
            }
        return {**figures, "source": self.source}

    def measure(self, tag: str = "", step: int | None = None) -> dict[str, Any]:
        """Memory now, kept under `tag` (with a time and the step) and fed to the trend check."""
        figures = self.read()
        self._count += 1
        self._allocated_sum += figures["allocated_gb"]
        for key in self._peak:
            self._peak[key] = max(self._peak[key], figures[key])
        entry = {**figures, "timestamp": time.time(), "step": step}
        if tag not in self.history:
            self.history[tag] = deque(maxlen=self._history_size)
        self.history[tag].append(entry)
        anomaly = self._trend.add(
            self._count if step is None else step, figures["allocated_gb"] * GIB
        )
        if anomaly is not None:
            logger.warning("memory: %s", anomaly["message"])
            self.trend_leaks.append(anomaly)
        return figures

    def set_baseline(self) -> dict[str, Any]:
        """Memory now is the baseline (call it once the model is loaded)."""
        figures = self.measure("baseline")
        self.baseline_gb = figures["allocated_gb"]
        return figures

    def leak_gb(self) -> float | None:
        """Allocated memory now minus the baseline (None without a baseline)."""
        if self.baseline_gb is None:
            return None
        return float(self.read()["allocated_gb"]) - self.baseline_gb

    def detect_leak(self, threshold_gb: float = 0.5) -> bool:
        """True when allocated memory is more than `threshold_gb` above the baseline."""
        growth = self.leak_gb()
        return growth is not None and growth > threshold_gb

    def get_summary(self) -> dict[str, Any]:
        """Peak, mean and baseline over the measurements, and the trend's findings."""
        return {
            "source": self.source,
            "measurements": self._count,
            "peak_allocated_gb": self._peak["allocated_gb"],
            "peak_reserved_gb": self._peak["reserved_gb"],
            "mean_allocated_gb": self._allocated_sum / self._count if self._count else None,
            "baseline_gb": self.baseline_gb,
            "growth_mib_per_step": self._trend.growth_mib_per_step,
            "trend_leaks": list(self.trend_leaks),
        }


class TrainingTimer:
    """Named timers: ``start(name)`` ... ``stop(name)`` returns the seconds.

    On a CUDA device the GPU is synchronised at both ends, so a timer covers
    the kernels it launched (`cuda_synchronizer`). Timers are flat (a timer
    started inside another keeps its own name) and may overlap. Statistics
    per name: count, total and mean exact over the run; std, min, max, p50,
    p95 over the last `summary_window`.
    """

    def __init__(
        self,
        device: Device = None,
        *,
        summary_window: int = 10_000,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        cuda_index, _ = resolve_cuda_index(device)
        self._sync = cuda_synchronizer() if cuda_index is not None else None
        self._clock = clock
        self._window = summary_window
        self._started: dict[str, float] = {}
        self.stats: dict[str, StageStats] = {}
        self.last: dict[str, float] = {}

    def start(self, name: str) -> None:
        if self._sync is not None:
            self._sync()
        self._started[name] = self._clock()

    def stop(self, name: str) -> float:
        """Seconds since `start(name)`; a `KeyError` for a timer not started."""
        if self._sync is not None:
            self._sync()
        now = self._clock()
        try:
            began = self._started.pop(name)
        except KeyError:
            raise KeyError(f"timer {name!r} was not started") from None
        elapsed = self.last[name] = now - began
        stats = self.stats.get(name)
        if stats is None:
            stats = self.stats[name] = StageStats(self._window)
        stats.add(elapsed)
        return elapsed

    def get_summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, stats in self.stats.items():
            recent = describe(stats.recent)
            out[name] = {
                "count": stats.count,
                "total_sec": stats.total,
                "mean_sec": stats.total / stats.count,
                "std_sec": recent["std"],
                "min_sec": recent["min"],
                "max_sec": recent["max"],
                "p50_sec": recent["p50"],
                "p95_sec": recent["p95"],
                "last_sec": self.last[name],
            }
        return out


class ThroughputTracker:
    """Samples/s and tokens/s over the last `window_size` updates (`ThroughputMeter`).

    Each update counts the time since the previous one (or since the tracker
    was made, or `start()`), so time between batches counts too.
    """

    def __init__(
        self, window_size: int = 100, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._meter = ThroughputMeter(window_size)
        self._clock = clock
        self._last = clock()
        self._rates: tuple[float | None, float | None] = (None, None)
        self.total_samples = 0
        self.total_tokens = 0

    def start(self) -> None:
        """Count time from now (the time before the first batch is not the loop's)."""
        self._last = self._clock()

    def update(self, num_samples: int, num_tokens: int = 0) -> None:
        now = self._clock()
        self._rates = self._meter.record(now - self._last, num_samples, num_tokens)
        self._last = now
        self.total_samples += num_samples
        self.total_tokens += num_tokens

    def get_current_throughput(self) -> dict[str, float]:
        samples, tokens = self._rates
        return {"samples_per_sec": samples or 0.0, "tokens_per_sec": tokens or 0.0}


class ComprehensiveProfiler:
    """Memory, iteration time and throughput of a loop, exported as one JSON.

    The baseline is memory when the profiler is made (make it after the
    model is loaded). `end_iteration` times the iteration, counts its work
    and measures memory under the tag ``iteration``. ``timer`` times other
    named parts (``profiler.timer.start("forward")``).
    """

    def __init__(
        self,
        device: Device = 0,
        *,
        window_size: int = 100,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.device = device
        self.memory = GPUMemoryProfiler(device)
        self.timer = TrainingTimer(device, clock=clock)
        self.throughput = ThroughputTracker(window_size, clock=clock)
        self.iterations = 0
        self.memory.set_baseline()

    def start_iteration(self) -> None:
        if self.iterations == 0:
            self.throughput.start()
        self.timer.start("iteration")

    def end_iteration(self, num_samples: int = 0, num_tokens: int = 0) -> float:
        """Seconds the iteration took."""
        seconds = self.timer.stop("iteration")
        self.throughput.update(num_samples, num_tokens)
        self.memory.measure("iteration", step=self.iterations)
        self.iterations += 1
        return seconds

    def summary(self) -> dict[str, Any]:
        """What `export_to_json` writes."""
        throughput = self.throughput
        return {
            "timestamp": datetime.now().isoformat(),
            "device": self.device,
            "iterations": self.iterations,
            "memory": self.memory.get_summary(),
            "timing": self.timer.get_summary(),
            "throughput": {
                **throughput.get_current_throughput(),
                "total_samples": throughput.total_samples,
                "total_tokens": throughput.total_tokens,
            },
        }

    def export_to_json(self, output_path: str | os.PathLike[str]) -> Path:
        return write_json_atomic(output_path, self.summary())
