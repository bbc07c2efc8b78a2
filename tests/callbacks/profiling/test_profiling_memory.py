"""Memory figures and leak detection by trend."""

from __future__ import annotations

import gc
import mmap
import random
from typing import Any

import pytest

from training_platform.callbacks.profiling.memory import LeakDetector, MemoryMonitor, rss_reader
from training_platform.callbacks.profiling.step_profiler import StepProfiler

MIB = 1 << 20
GIB = 1 << 30


def _feed(detector: LeakDetector, values_mib: list[float], capacity: float | None = None) -> list:
    fired = []
    for step, value in enumerate(values_mib, start=1):
        anomaly = detector.add(step, value * MIB, capacity)
        if anomaly is not None:
            fired.append(anomaly)
    return fired


def test_a_steady_climb_is_reported_with_its_growth_rate() -> None:
    detector = LeakDetector("cuda:0 allocated memory", window=20, warmup_steps=0, check_every=1)
    rng = random.Random(0)
    fired = _feed(detector, [1000 + 8 * step + rng.uniform(-2, 2) for step in range(20)])
    assert len(fired) == 1
    anomaly = fired[0]
    assert anomaly["type"] == "memory_leak"
    assert anomaly["severity"] == "warning"
    assert "cuda:0 allocated memory grows 8.0" in anomaly["message"]
    assert "MiB/step" in anomaly["message"]
    assert detector.growth_mib_per_step == pytest.approx(8.0, abs=0.3)


def test_noise_around_a_flat_line_stays_quiet() -> None:
    detector = LeakDetector("process RSS", window=20, warmup_steps=0, check_every=1)
    rng = random.Random(1)
    assert _feed(detector, [2000 + rng.uniform(-100, 100) for _ in range(200)]) == []


def test_a_one_off_jump_is_not_a_leak() -> None:
    # The optimizer creating its state at the first update: a step, not a trend.
    detector = LeakDetector("cuda:0 allocated memory", window=20, warmup_steps=0, check_every=1)
    values = [1000.0] * 10 + [3000.0] * 60
    assert _feed(detector, values) == []


def test_an_allocator_sawtooth_is_not_a_leak() -> None:
    detector = LeakDetector("process RSS", window=30, warmup_steps=0, check_every=1)
    values = [1000.0 + 100.0 * (step % 10) for step in range(300)]
    assert _feed(detector, values) == []


def test_a_leak_is_reported_once_per_window_not_every_step() -> None:
    detector = LeakDetector("process RSS", window=10, warmup_steps=0, check_every=1)
    fired = _feed(detector, [100.0 + 20 * step for step in range(40)])
    assert 2 <= len(fired) <= 4  # 31 full windows, at most one report per window


def test_warmup_steps_are_ignored() -> None:
    detector = LeakDetector("process RSS", window=10, warmup_steps=15, check_every=1)
    # Growth only during warm-up, flat afterwards.
    assert _feed(detector, [100.0 * step for step in range(15)] + [1500.0] * 30) == []


def test_a_leak_that_will_fill_the_device_soon_is_critical() -> None:
    detector = LeakDetector("cuda:0 allocated memory", window=10, warmup_steps=0, check_every=1)
    fired = _feed(detector, [1000.0 + 100 * step for step in range(10)], capacity=2500 * MIB)
    assert fired[0]["severity"] == "critical"
    assert "full in about" in fired[0]["message"]


def test_a_short_window_is_refused() -> None:
    with pytest.raises(ValueError):
        LeakDetector("x", window=2)


def _loop(profiler: StepProfiler, steps: int, leak: list[mmap.mmap] | None) -> list[dict]:
    anomalies = []
    # Garbage left by earlier tests, freed by a collection in mid-loop, would
    # shrink the RSS under the leak: collect it first, then hold collections off.
    gc.collect()
    gc.disable()
    try:
        _steps(profiler, steps, leak, anomalies)
    finally:
        gc.enable()
    return anomalies


def _steps(
    profiler: StepProfiler, steps: int, leak: list[mmap.mmap] | None, anomalies: list[dict]
) -> None:
    for step in range(steps):
        profiler.on_step_begin(step)
        # Fresh pages from the OS, each written so it is resident: a heap
        # allocation could reuse memory earlier tests freed (glibc raises its
        # mmap threshold after large frees), and the RSS would not grow.
        chunk = mmap.mmap(-1, 4 * MIB)
        for offset in range(0, 4 * MIB, mmap.PAGESIZE):
            chunk[offset] = 1
        if leak is not None:
            leak.append(chunk)
        else:
            chunk.close()
        anomalies += profiler.on_step_end(step).get("anomalies", [])


# Sampled every step (min_interval_s=0): these loops take about a millisecond a step.
LEAK_OPTIONS: dict[str, Any] = {
    "leak_window": 20,
    "leak_warmup_steps": 3,
    "leak_min_growth_mib": 32.0,
    "min_interval_s": 0.0,
}


def test_leak_detection_fires_on_a_leaking_loop() -> None:
    if rss_reader()() is None:
        pytest.skip("process RSS cannot be read on this platform (no psutil, no /proc)")
    leaked: list[mmap.mmap] = []
    profiler = StepProfiler(memory=MemoryMonitor(**LEAK_OPTIONS))
    anomalies = _loop(profiler, steps=40, leak=leaked)
    leaks = [a for a in anomalies if a["type"] == "memory_leak"]
    assert leaks, "4 MiB kept per step must be reported"
    assert "process RSS grows" in leaks[0]["message"]
    assert "MiB/step" in leaks[0]["message"]


def test_leak_detection_stays_quiet_on_a_steady_loop() -> None:
    if rss_reader()() is None:
        pytest.skip("process RSS cannot be read on this platform (no psutil, no /proc)")
    profiler = StepProfiler(memory=MemoryMonitor(**LEAK_OPTIONS))
    assert _loop(profiler, steps=40, leak=None) == []


def test_short_steps_are_sampled_by_time_and_growth_stays_per_step() -> None:
    now = [0.0]
    rss = [1 * GIB]
    monitor = MemoryMonitor(
        rss=lambda: rss[0],
        clock=lambda: now[0],
        min_interval_s=0.05,
        leak_window=10,
        leak_warmup_steps=0,
        leak_min_growth_mib=32.0,
    )
    sampled, anomalies = 0, []
    for _ in range(200):  # 10 ms steps leaking 2 MiB each
        now[0] += 0.01
        rss[0] += 2 * MIB
        _, extra, found = monitor.on_step_end()
        sampled += "profiling/rss_gib" in extra
        anomalies += found
    assert 35 <= sampled <= 45  # about one step in five
    assert anomalies and "grows 2.00 MiB/step" in anomalies[0]["message"]


def test_the_profiler_skips_the_monitor_until_a_sample_is_due_and_keeps_steps_per_step() -> None:
    now = [0.0]
    rss = [1 * GIB]
    reads = []

    def read_rss() -> int:
        reads.append(now[0])
        return rss[0]

    monitor = MemoryMonitor(
        rss=read_rss,
        clock=lambda: now[0],
        min_interval_s=0.05,
        leak_window=10,
        leak_warmup_steps=0,
        leak_min_growth_mib=32.0,
    )
    profiler = StepProfiler(memory=monitor, clock=monitor.clock)
    calls = []
    original = monitor.on_step_end
    monitor.on_step_end = lambda steps=None: calls.append(steps) or original(steps)  # type: ignore[method-assign]
    anomalies = []
    for step in range(200):  # 10 ms steps leaking 2 MiB each
        profiler.on_step_begin(step)
        now[0] += 0.01
        rss[0] += 2 * MIB
        anomalies += profiler.on_step_end(step).get("anomalies", [])

    assert 35 <= len(calls) <= 45, "called only when a sample is due"
    assert len(reads) == len(calls)
    assert calls == sorted(calls) and calls[-1] >= 195  # the profiler's step count
    assert anomalies and "grows 2.00 MiB/step" in anomalies[0]["message"]


def test_a_monitor_on_another_clock_is_asked_every_step() -> None:
    now = [0.0]
    monitor = MemoryMonitor(rss=lambda: GIB, clock=lambda: now[0], min_interval_s=0.05)
    profiler = StepProfiler(memory=monitor)  # perf_counter: cannot tell when it is due
    sampled = 0
    for step in range(20):
        profiler.on_step_begin(step)
        now[0] += 0.01
        sampled += "profiling/rss_gib" in profiler.on_step_end(step).get("extra", {})
    assert 3 <= sampled <= 5  # the monitor's own clock decides


def test_memory_above_the_baseline_is_reported() -> None:
    rss = [1 * GIB]
    monitor = MemoryMonitor(rss=lambda: rss[0])
    monitor.mark_baseline()
    rss[0] = 3 * GIB // 2
    performance, extra, anomalies = monitor.on_step_end()
    assert performance == {}  # no GPU figure without a GPU
    assert extra["profiling/rss_gib"] == pytest.approx(1.5)
    assert extra["profiling/rss_above_baseline_gib"] == pytest.approx(0.5)
    assert anomalies == []


def test_cuda_memory_is_reported_per_device_and_a_gpu_leak_is_caught() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    torch.cuda.init()
    profiler = StepProfiler(memory=MemoryMonitor(**LEAK_OPTIONS, track_rss=False))
    profiler.mark_baseline()
    kept = []
    anomalies = []
    result: dict = {}
    for step in range(40):
        profiler.on_step_begin(step)
        kept.append(torch.empty(4 * MIB, dtype=torch.uint8, device="cuda"))
        result = profiler.on_step_end(step)
        anomalies += result.get("anomalies", [])
    device = torch.cuda.current_device()
    allocated = result["performance"]["gpu_memory_allocated"]
    assert allocated == pytest.approx(torch.cuda.memory_allocated(device) / GIB)
    extra = result["extra"]
    assert extra[f"profiling/cuda{device}/reserved_gib"] >= allocated
    assert extra[f"profiling/cuda{device}/peak_gib"] >= allocated
    assert extra[f"profiling/cuda{device}/above_baseline_gib"] >= 40 * 4 / 1024 * 0.99
    assert any(a["message"].startswith(f"cuda:{device} allocated memory grows") for a in anomalies)
