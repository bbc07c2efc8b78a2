"""Memory per step: CUDA allocated/reserved/peak per device, process RSS, leak detection.

A leak is a *trend*: post-step memory is fitted by least squares over a
window of steps, and only a steady climb (large growth over the window and a
good linear fit) is reported. One noisy sample, the allocator's sawtooth or
the one-off jump when the optimizer creates its state do not fit a line well
(a single jump in the middle of a window reaches R² = 0.75 at most), so they
stay quiet.

torch is never imported here: it is used once the trainer has imported it, and
CUDA is only queried once the process has initialised it itself (querying
first would create a CUDA context, which holds GPU memory, on every visible
GPU).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from training_platform.callbacks.profiling.stats import linear_trend

logger = logging.getLogger(__name__)

GIB = float(1 << 30)
MIB = float(1 << 20)


@dataclass(frozen=True)
class DeviceMemory:
    """One CUDA device as seen by this process's caching allocator, in bytes."""

    index: int
    allocated: int
    reserved: int
    peak: int
    total: int | None = None
    peak_reserved: int | None = None


@dataclass(frozen=True)
class MemorySnapshot:
    """Memory of this process at one instant; `rss` is None where it cannot be read."""

    devices: tuple[DeviceMemory, ...] = ()
    rss: int | None = None
    current_device: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """GiB figures for JSON summaries."""
        out: dict[str, Any] = {}
        if self.rss is not None:
            out["rss_gib"] = self.rss / GIB
        for device in self.devices:
            out[f"cuda:{device.index}"] = {
                "allocated_gib": device.allocated / GIB,
                "reserved_gib": device.reserved / GIB,
                "peak_gib": device.peak / GIB,
            }
        return out


def rss_reader() -> Callable[[], int | None]:
    """A function returning this process's resident set size in bytes (or None).

    On Linux it re-reads /proc/self/statm through a descriptor kept open (far
    cheaper than psutil, see docs/benchmarks.md, Profiling kit: this runs
    every training step); psutil elsewhere; None where neither works.
    """
    if os.path.exists("/proc/self/statm"):
        return _StatmReader()
    try:
        import psutil
    except ImportError:
        return lambda: None
    process = psutil.Process()
    return lambda: int(process.memory_info().rss)


class _StatmReader:
    """RSS from /proc/self/statm; procfs regenerates the text on every read at offset 0.

    One syscall per read. "self" is resolved when the file is opened, so a
    forked child must reopen it or it would report its parent's memory: a fork
    hook bumps a generation counter rather than calling getpid() every step.
    """

    _forks = 0
    _hooked = False

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._fd: int | None = None
        self._generation = -1
        if not _StatmReader._hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_StatmReader._count_fork)
            _StatmReader._hooked = True

    @staticmethod
    def _count_fork() -> None:
        _StatmReader._forks += 1

    def __call__(self) -> int | None:
        try:
            fd = self._fd
            if fd is None or self._generation != _StatmReader._forks:
                fd = self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
                self._generation = _StatmReader._forks
            return int(os.pread(fd, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def __del__(self) -> None:
        if self._fd is not None and self._generation == _StatmReader._forks:
            os.close(self._fd)


def cuda_devices(cuda: Any, totals: dict[int, int]) -> tuple[tuple[DeviceMemory, ...], int | None]:
    """The devices this process uses (the current one and any with memory reserved),
    and the current device's index.

    `cuda` is the ``torch.cuda`` module; `totals` caches each device's capacity
    between calls. Nothing is reported before the process initialised CUDA.
    """
    if not cuda.is_initialized():
        return (), None
    current = cuda.current_device()
    devices = []
    for index in range(cuda.device_count()):
        # One memory_stats call per device: memory_allocated() & co. each
        # rebuild the same ~100-entry dict.
        stats = cuda.memory_stats(index)
        reserved = int(stats.get("reserved_bytes.all.current", 0))
        if index != current and reserved == 0:
            continue
        if index not in totals:
            totals[index] = int(cuda.get_device_properties(index).total_memory)
        devices.append(
            DeviceMemory(
                index=index,
                allocated=int(stats.get("allocated_bytes.all.current", 0)),
                reserved=reserved,
                peak=int(stats.get("allocated_bytes.all.peak", 0)),
                total=totals[index],
                peak_reserved=int(stats.get("reserved_bytes.all.peak", 0)),
            )
        )
    return tuple(devices), current


@dataclass
class LeakDetector:
    """Fits post-step memory of one series over its last `window` samples.

    Each sample is ``(step, bytes)``, `step` counting training steps, so the
    slope is MiB per step however often memory is sampled. Fires when the
    fitted growth across the window reaches `min_growth_mib` and R² reaches
    `min_r_squared`; then stays quiet for a window of samples (one report per
    episode, not one per step). Samples of the first `warmup_steps` steps are
    ignored: allocators and optimizers grow legitimately while a run warms up.
    See the module docstring for why a trend.
    """

    name: str
    window: int = 50
    min_growth_mib: float = 64.0
    min_r_squared: float = 0.8
    warmup_steps: int = 10
    check_every: int = 10
    growth_mib_per_step: float | None = field(default=None, init=False)
    _steps: deque[float] = field(init=False, repr=False)
    _values: deque[float] = field(init=False, repr=False)
    _samples: int = field(default=0, init=False, repr=False)
    _quiet_until: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 3:
            raise ValueError("a leak window needs at least 3 samples")
        self._steps = deque(maxlen=self.window)
        self._values = deque(maxlen=self.window)

    def add(
        self, step: int, value_bytes: float, capacity: float | None = None
    ) -> dict[str, str] | None:
        """Add the sample taken after `step`; returns a ``memory_leak`` anomaly or None.

        `capacity` (bytes), when known, turns the message into a projection of
        the steps left, and the severity into critical when fewer than a window.
        """
        if step <= self.warmup_steps:
            return None
        self._samples += 1
        self._steps.append(step)
        self._values.append(value_bytes / MIB)
        if len(self._values) < self.window or self._samples % self.check_every:
            return None
        span = self._steps[-1] - self._steps[0]
        if span <= 0:
            return None
        slope, r_squared = linear_trend(self._values, self._steps)
        self.growth_mib_per_step = slope
        growth = slope * span
        if self._samples < self._quiet_until or growth < self.min_growth_mib:
            return None
        if r_squared < self.min_r_squared:
            return None
        self._quiet_until = self._samples + self.window
        severity = "warning"
        message = (
            f"{self.name} grows {slope:.2f} MiB/step over the last {span:.0f} steps "
            f"(+{growth:.0f} MiB, R²={r_squared:.2f}); now {self._values[-1] / 1024:.2f} GiB"
        )
        if capacity:
            steps_left = (capacity / MIB - self._values[-1]) / slope
            message += f"; full in about {max(steps_left, 0):.0f} steps at this rate"
            if steps_left < span:
                severity = "critical"
        return {"type": "memory_leak", "severity": severity, "message": message}


class MemoryMonitor:
    """Post-step memory figures and leak anomalies for `StepProfiler`.

    Memory is sampled after a step when at least `min_interval_s` has passed
    since the last sample (and after the first step): every step of a real
    run, whose steps take longer, but not every step of a millisecond loop,
    where reading memory (a syscall: docs/benchmarks.md, Profiling kit) would
    cost more than the 1% the kit may take. Records of unsampled steps carry
    no memory figures.

    `track_rss` (default on) also follows host memory when a GPU is in use:
    rollout buffers and logged Python objects leak on the host too.
    `reset_peak_per_step` makes the reported CUDA peak the peak since the
    previous sample (it resets torch's peak counter, which other code may be
    reading). `leak_*` configure the `LeakDetector` of each series.
    """

    def __init__(
        self,
        *,
        track_rss: bool = True,
        reset_peak_per_step: bool = False,
        leak_window: int = 50,
        leak_min_growth_mib: float = 64.0,
        leak_min_r_squared: float = 0.8,
        leak_warmup_steps: int = 10,
        min_interval_s: float = 0.05,
        rss: Callable[[], int | None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._read_rss = (rss or rss_reader()) if track_rss else None
        self.reset_peak_per_step = reset_peak_per_step
        self._min_interval = min_interval_s
        self.clock = clock
        # When the next sample is due (`clock` time): callers in a hot loop can
        # skip `on_step_end` before then, passing the step count on instead.
        self.next_sample_at = -math.inf
        self._steps = 0
        self._reset_due = True
        self._new_detector = functools.partial(
            LeakDetector,
            window=leak_window,
            min_growth_mib=leak_min_growth_mib,
            min_r_squared=leak_min_r_squared,
            warmup_steps=leak_warmup_steps,
        )
        self._detectors: dict[str, LeakDetector] = {}
        self._totals: dict[int, int] = {}
        self._cuda_module: Any = None
        self._cuda_checked = False
        self.baseline: MemorySnapshot | None = None
        self.last: MemorySnapshot | None = None

    def _cuda(self) -> Any | None:
        """``torch.cuda`` once the trainer has imported torch and a GPU exists.

        torch is never imported here (a process without it loaded has no CUDA
        tensors, and importing it costs seconds); until the trainer imports it
        this is asked again each step. Then `is_available()` is asked once: it
        cannot change within a process, and is not cheap (docs/benchmarks.md,
        Profiling kit).
        """
        if not self._cuda_checked:
            torch = sys.modules.get("torch")
            if torch is None:
                return None
            self._cuda_checked = True
            self._cuda_module = torch.cuda if torch.cuda.is_available() else None
        return self._cuda_module

    def snapshot(self) -> MemorySnapshot:
        """Memory now (no side effects)."""
        cuda = self._cuda()
        devices, current = cuda_devices(cuda, self._totals) if cuda is not None else ((), None)
        rss = self._read_rss() if self._read_rss is not None else None
        return MemorySnapshot(devices=devices, rss=rss, current_device=current)

    def mark_baseline(self) -> MemorySnapshot:
        """Remember memory now (call it after the model is loaded)."""
        self.baseline = self.snapshot()
        return self.baseline

    def on_step_begin(self) -> None:
        if not (self.reset_peak_per_step and self._reset_due):
            return
        self._reset_due = False
        cuda = self._cuda()
        if cuda is not None and cuda.is_initialized():
            for index in range(cuda.device_count()):
                cuda.reset_peak_memory_stats(index)

    def on_step_end(
        self, steps: int | None = None
    ) -> tuple[dict[str, float], dict[str, float], list[dict[str, str]]]:
        """(performance fields, extra fields, anomalies) for this step's record.

        All three are empty on a step that is not sampled. `steps` is the
        number of steps ended so far, this one included, for a caller that
        does not call this every step (see `next_sample_at`); by default
        each call counts one step.
        """
        self._steps = self._steps + 1 if steps is None else steps
        now = self.clock()
        if now < self.next_sample_at:  # the same test a caller skipping us makes
            return {}, {}, []
        self.next_sample_at = now + self._min_interval
        self._reset_due = True
        snap = self.last = self.snapshot()
        performance: dict[str, float] = {}
        extra: dict[str, float] = {}
        # (series name, bytes, capacity, extra key of its growth rate)
        series: list[tuple[str, int, int | None, str]] = []
        for device in snap.devices:
            prefix = f"profiling/cuda{device.index}"
            extra[f"{prefix}/allocated_gib"] = device.allocated / GIB
            extra[f"{prefix}/reserved_gib"] = device.reserved / GIB
            extra[f"{prefix}/peak_gib"] = device.peak / GIB
            if device.index == snap.current_device:
                performance["gpu_memory_allocated"] = device.allocated / GIB
            name = f"cuda:{device.index} allocated memory"
            series.append((name, device.allocated, device.total, f"{prefix}/growth_mib_per_step"))
        if snap.rss is not None:
            extra["profiling/rss_gib"] = snap.rss / GIB
            series.append(("process RSS", snap.rss, None, "profiling/rss_growth_mib_per_step"))
        anomalies: list[dict[str, str]] = []
        for name, value, capacity, rate_key in series:
            detector = self._detectors.get(name)
            if detector is None:
                detector = self._detectors[name] = self._new_detector(name)
            anomaly = detector.add(self._steps, value, capacity)
            if anomaly is not None:
                anomalies.append(anomaly)
            if detector.growth_mib_per_step is not None:
                extra[rate_key] = detector.growth_mib_per_step
        if self.baseline is not None:
            extra.update(_above_baseline(self.baseline, snap))
        return performance, extra, anomalies


def _above_baseline(baseline: MemorySnapshot, now: MemorySnapshot) -> dict[str, float]:
    above: dict[str, float] = {}
    if baseline.rss is not None and now.rss is not None:
        above["profiling/rss_above_baseline_gib"] = (now.rss - baseline.rss) / GIB
    base_devices = {device.index: device for device in baseline.devices}
    for device in now.devices:
        base = base_devices.get(device.index)
        if base is not None:
            key = f"profiling/cuda{device.index}/above_baseline_gib"
            above[key] = (device.allocated - base.allocated) / GIB
    return above
