"""The step profiler: stage timing, throughput, memory and scheduled torch.profiler traces.

`StepProfiler` is a step contributor for `PlatformCallback(..., contributors=[...])`:
``on_step_begin(step)`` / ``on_step_end(step) -> {group: {...}}``, the groups
merged into that step's record::

    profiler = StepProfiler("run7", trace=TraceSchedule(wait=10))  # the default metrics dir
    callback = PlatformCallback("run7", contributors=[profiler])
    profiler.mark_baseline()                 # after the model is loaded
    ...
    with profiler.stage("rollout"):
        ...
    profiler.add_batch(samples=64, tokens=64 * 512)

Files, under ``{output_dir}/{job_id}_profiles/``: ``stage_times.json`` (the
run's stage summary, rewritten every `summary_interval_s` and on `close()`)
and ``step_N/`` directories from torch.profiler (see `torch_trace`).

Importing this module imports neither torch nor anything from the server.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from training_platform.callbacks.profiling.memory import MemoryMonitor, MemorySnapshot
from training_platform.callbacks.profiling.stage_timer import Stage, StageStats, StageTimer
from training_platform.callbacks.profiling.stats import finite_or_none
from training_platform.callbacks.profiling.summary import MemoryHistory, device_info
from training_platform.callbacks.profiling.torch_trace import TorchTraceRecorder, TraceSchedule
from training_platform.callbacks.wire.locations import default_output_dir
from training_platform.callbacks.wire.schema import validate_job_id

__all__ = ["StageTimer", "StepProfiler", "ThroughputMeter", "TraceSchedule", "profile_dir"]

logger = logging.getLogger(__name__)

SUMMARY_VERSION = 2
"""`stage_times.json`'s shape: 2 added version, device, throughput, memory peak/mean/trend/leaks
and overhead to version 1's (which had no "version" key)."""


def profile_dir(output_dir: str | os.PathLike[str], job_id: str) -> Path:
    """``{output_dir}/{job_id}_profiles``: where a job's profiling artifacts live."""
    return Path(output_dir) / f"{validate_job_id(job_id)}_profiles"


class ThroughputMeter:
    """Samples/s and tokens/s over the last `window` steps.

    Each step contributes its wall-clock interval (from the previous step's end,
    so time spent between steps counts too) and its work; the rate is total
    work over total time in the window, which weights long steps correctly.
    """

    __slots__ = ("_marks", "_samples", "_seconds", "_tokens")

    def __init__(self, window: int = 10) -> None:
        if window < 1:
            raise ValueError("throughput window must be >= 1 step")
        # Run totals (seconds, samples, tokens) at the end of each of the last
        # `window` steps and at the step before them: the window's work is the
        # newest totals minus the oldest. One append per step; the bounded
        # deque drops the oldest by itself.
        self._marks: deque[tuple[float, int, int]] = deque([(0.0, 0, 0)], maxlen=window + 1)
        self._seconds = 0.0
        self._samples = 0
        self._tokens = 0

    def record(
        self, seconds: float, samples: int, tokens: int
    ) -> tuple[float | None, float | None]:
        """Add one step; returns (samples/s, tokens/s), None where no work was counted."""
        total_seconds = self._seconds = self._seconds + seconds
        total_samples = self._samples = self._samples + samples
        total_tokens = self._tokens = self._tokens + tokens
        marks = self._marks
        marks.append((total_seconds, total_samples, total_tokens))
        first_seconds, first_samples, first_tokens = marks[0]
        elapsed = total_seconds - first_seconds
        if elapsed <= 0.0:
            return None, None
        samples = total_samples - first_samples
        tokens = total_tokens - first_tokens
        return (samples / elapsed if samples else None, tokens / elapsed if tokens else None)

    def summary(self) -> dict[str, float | int | None]:
        """Run-long totals and rates (work over all the steps' time)."""
        seconds, samples, tokens = self._seconds, self._samples, self._tokens
        return {
            "seconds": seconds,
            "samples": samples,
            "tokens": tokens,
            "samples_per_second": samples / seconds if samples and seconds > 0 else None,
            "tokens_per_second": tokens / seconds if tokens and seconds > 0 else None,
        }


class StepProfiler:
    """Stage timer + throughput + memory + torch.profiler, one step at a time.

    Every step's result: ``timing`` (seconds per stage), ``performance``
    (``step_time``, ``tokens_per_second`` when tokens were counted,
    ``gpu_memory_allocated`` GiB on a GPU), ``extra`` (``profiling/*``: samples/s,
    per-device reserved/peak, RSS, memory growth) and ``anomalies``
    (``memory_leak``) when one fired. ``profiler.stage("rollout")`` is a
    context manager and a decorator timing a stage (`StageTimer.stage`).
    `memory` takes a configured `MemoryMonitor` (leak window and
    thresholds), True for the defaults, or False. Without a
    `job_id` nothing is written to disk (and `trace` is refused). Each part
    that fails is logged once and switched off; `on_step_end` never raises.
    """

    def __init__(
        self,
        job_id: str | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        *,
        cuda_sync: bool = False,
        throughput_window: int = 10,
        memory: MemoryMonitor | bool = True,
        trace: TraceSchedule | None = None,
        summary_interval_s: float = 30.0,
        summary_window: int = 10_000,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if trace is not None and job_id is None:
            raise ValueError("torch.profiler traces need a job_id (they go to {job_id}_profiles/)")
        self.job_id = validate_job_id(job_id) if job_id is not None else None
        self.profile_dir = (
            profile_dir(output_dir or default_output_dir(), job_id) if job_id else None
        )
        self.timer = StageTimer(cuda_sync=cuda_sync, clock=clock, summary_window=summary_window)
        # The timer's own method, bound here rather than wrapped: a wrapper would
        # be one more Python call around every stage of every step.
        self.stage = self.timer.stage
        self.throughput = ThroughputMeter(throughput_window)
        if isinstance(memory, MemoryMonitor):
            self.memory: MemoryMonitor | None = memory
        else:
            self.memory = MemoryMonitor(clock=clock) if memory else None
        # Whether our clock can tell when the monitor's next sample is due.
        self._memory_due_known = self.memory is not None and self.memory.clock is clock
        self.tracer = (
            TorchTraceRecorder(self.profile_dir, trace)
            if trace is not None and self.profile_dir is not None
            else None
        )
        self._clock = clock
        self._summary_interval = summary_interval_s
        self._step_time = StageStats(summary_window)
        self._traced_step_time = StageStats(summary_window)  # steps under torch.profiler
        self.memory_history = MemoryHistory()
        self._step_begin: float | None = None
        self._last_end: float | None = None
        self._samples = 0
        self._tokens = 0
        self._steps = 0
        self._last_summary = clock()
        self._failed: set[str] = set()

    # -- what the training loop calls -------------------------------------------------

    stage: Callable[[str], Stage]  # set in __init__: ``with profiler.stage("rollout"):``

    def add_batch(self, samples: int = 0, tokens: int = 0) -> None:
        """Count work done in the current step (for samples/s and tokens/s)."""
        self._samples += samples
        self._tokens += tokens

    def mark_baseline(self) -> MemorySnapshot | None:
        """Record memory now as the baseline (call it once the model is loaded)."""
        if self.memory is None:
            return None
        snapshot: MemorySnapshot | None = self._run("memory", self.memory.mark_baseline)
        return snapshot

    # -- the step contributor protocol ------------------------------------------------

    def on_step_begin(self, step: int) -> None:
        now = self._clock()
        self._step_begin = now
        if self._last_end is None:
            self._last_end = now
        if self.memory is not None and self.memory.reset_peak_per_step:
            self._run("memory", self.memory.on_step_begin)
        if self.tracer is not None:
            self._run("trace", self.tracer.on_step_begin, step)

    def on_step_end(self, step: int) -> dict[str, Any]:
        """This step's ``timing``, ``performance``, ``extra`` and ``anomalies``."""
        now = self._clock()
        begin = self._step_begin if self._step_begin is not None else self._last_end
        interval = now - self._last_end if self._last_end is not None else None
        self._step_begin = None
        self._last_end = now
        self._steps += 1

        result: dict[str, Any] = {}
        timing = self.timer.collect()
        if timing:
            result["timing"] = timing
        performance: dict[str, float] = {}
        extra: dict[str, float] = {}
        if begin is not None:
            step_time = performance["step_time"] = now - begin
            self._step_time.add(step_time)
            if self.tracer is not None and self.tracer.step_traced:
                self._traced_step_time.add(step_time)
        if interval is not None:
            samples_rate, tokens_rate = self.throughput.record(
                interval, self._samples, self._tokens
            )
            if tokens_rate is not None:
                performance["tokens_per_second"] = tokens_rate
            if samples_rate is not None:
                extra["profiling/samples_per_second"] = samples_rate
        self._samples = self._tokens = 0

        # Memory is sampled at most every `min_interval_s`: skip the call
        # (its cost right after a step: docs/benchmarks.md, Profiling kit) until then.
        if self.memory is not None and (
            not self._memory_due_known or now >= self.memory.next_sample_at
        ):
            measured = self._run("memory", self.memory.on_step_end, self._steps)
            if measured is not None:
                memory_performance, memory_extra, anomalies = measured
                performance.update(memory_performance)
                extra.update(memory_extra)
                self.memory_history.add(step, memory_extra, anomalies)
                if anomalies:
                    result["anomalies"] = anomalies
        if self.tracer is not None:
            self._run("trace", self.tracer.on_step_end, step)
        if performance:
            result["performance"] = performance
        if extra:
            result["extra"] = extra
        if self.profile_dir is not None and now - self._last_summary >= self._summary_interval:
            self._last_summary = now
            self._run("summary", self.write_summary)
        return result

    # -- summaries and shutdown ---------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """What `stage_times.json` holds (see docs/profiling.md)."""
        memory = self.memory
        return {
            "version": SUMMARY_VERSION,
            "job_id": self.job_id,
            "updated_at": time.time(),
            "steps": self._steps,
            "percentile_window": self._step_time.recent.maxlen,
            "cuda_sync": self.timer.cuda_sync,
            "device": device_info(),
            "step_time": self._step_time.summary() if self._step_time.count else None,
            "stages": self.timer.summary(),
            "throughput": self.throughput.summary(),
            "memory": {
                "baseline": memory.baseline.as_dict() if memory and memory.baseline else None,
                "last": memory.last.as_dict() if memory and memory.last else None,
                **(self.memory_history.summary() if memory else {}),
            },
            "traces": [path.name for path in self.tracer.written] if self.tracer else [],
            "overhead": self._overhead(),
        }

    def _overhead(self) -> dict[str, Any]:
        """What torch.profiler cost: traced steps against the others, and its exports."""
        traced, steps = self._traced_step_time, self._step_time
        others = steps.count - traced.count
        return {
            "traced_steps": traced.count,
            "traced_step_mean": traced.total / traced.count if traced.count else None,
            "other_step_mean": (steps.total - traced.total) / others if others > 0 else None,
            "trace_export_seconds": self.tracer.export_seconds if self.tracer else 0.0,
        }

    def write_summary(self) -> Path | None:
        """Rewrite ``stage_times.json`` atomically; returns its path (None without a job)."""
        if self.profile_dir is None:
            return None
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        target = self.profile_dir / "stage_times.json"
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        payload = json.dumps(finite_or_none(self.summary()), indent=2)
        temp.write_text(payload + "\n", encoding="utf-8")
        os.replace(temp, target)  # readers never see half a file
        return target

    def close(self) -> None:
        """Write the final summary and any trace cycle cut short. Safe to call twice."""
        if self.tracer is not None:
            self._run("trace", self.tracer.close)
        if self.profile_dir is not None:
            self._run("summary", self.write_summary)

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, part: str, action: Callable[..., Any], *args: Any) -> Any:
        # A failing part is logged once. Measurements are switched off (a broken
        # probe would fail every step); the summary file is retried at the next
        # interval (a full disk may be freed).
        retry = part == "summary"
        if part in self._failed and not retry:
            return None
        try:
            return action(*args)
        except Exception:
            if part not in self._failed:
                self._failed.add(part)
                then = "retrying at the next interval" if retry else "it is switched off"
                logger.warning("profiling: %s failed; %s", part, then, exc_info=True)
            return None
