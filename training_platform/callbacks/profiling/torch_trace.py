"""torch.profiler on scheduled training steps: a Chrome/Perfetto trace and op_stats.csv.

Each recorded cycle is written to ``{profile_dir}/step_N/`` where N is the first
recorded training step:

- ``trace.json``: Chrome trace format, opens in https://ui.perfetto.dev and
  chrome://tracing;
- ``op_stats.csv``: one row per operator, heaviest first, with ``op_name,
  self_time_ms, total_time_ms, calls`` (CPU time), then ``self_cuda_time_ms,
  cuda_time_ms`` when CUDA was profiled, then the memory columns
  (``self_cpu_memory_mb, cpu_memory_mb`` and, with CUDA, ``self_cuda_memory_mb,
  cuda_memory_mb``) when memory was profiled.

Any failure (torch missing, another profiler already running, a full disk) is
logged once and turns the recorder off: profiling never stops training.
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_US_PER_MS = 1000.0
_BYTES_PER_MB = float(1 << 20)


@dataclass(frozen=True)
class TraceSchedule:
    """When to record, in torch.profiler's own terms, counted from the first step seen.

    Each cycle skips `wait` steps, runs `warmup` steps with the profiler on but
    discarded (its start-up cost would distort them), then records `active`
    steps. `repeat` cycles in all (0: for the whole run); `skip_first` steps are
    skipped once before the first cycle.
    """

    wait: int = 5
    warmup: int = 1
    active: int = 2
    repeat: int = 1
    skip_first: int = 0
    record_shapes: bool = False
    profile_memory: bool = True
    with_stack: bool = False

    def __post_init__(self) -> None:
        if self.active < 1:
            raise ValueError("TraceSchedule.active must be >= 1")
        if min(self.wait, self.warmup, self.repeat, self.skip_first) < 0:
            raise ValueError("TraceSchedule counts must be >= 0")


# (column, divisor, event attributes best first). torch renamed cuda_* to
# device_* (2.4): each column reads whichever name this version has.
Column = tuple[str, float, tuple[str, ...]]
_CPU_COLUMNS: tuple[Column, ...] = (
    ("self_time_ms", _US_PER_MS, ("self_cpu_time_total",)),
    ("total_time_ms", _US_PER_MS, ("cpu_time_total",)),
)
_CUDA_COLUMNS: tuple[Column, ...] = (
    ("self_cuda_time_ms", _US_PER_MS, ("self_device_time_total", "self_cuda_time_total")),
    ("cuda_time_ms", _US_PER_MS, ("device_time_total", "cuda_time_total")),
)
_CPU_MEMORY_COLUMNS: tuple[Column, ...] = (
    ("self_cpu_memory_mb", _BYTES_PER_MB, ("self_cpu_memory_usage",)),
    ("cpu_memory_mb", _BYTES_PER_MB, ("cpu_memory_usage",)),
)
_CUDA_MEMORY_COLUMNS: tuple[Column, ...] = (
    ("self_cuda_memory_mb", _BYTES_PER_MB, ("self_device_memory_usage", "self_cuda_memory_usage")),
    ("cuda_memory_mb", _BYTES_PER_MB, ("device_memory_usage", "cuda_memory_usage")),
)


def _columns(event: Any, columns: tuple[Column, ...]) -> dict[str, float]:
    row = {}
    for column, divisor, names in columns:
        value = next((v for n in names if (v := getattr(event, n, None)) is not None), 0)
        row[column] = float(value) / divisor
    return row


def op_stats_rows(events: Any, *, cuda: bool, memory: bool) -> list[dict[str, Any]]:
    """Rows for op_stats.csv from ``prof.key_averages()``, heaviest first."""
    extra_columns: tuple[Column, ...] = _CUDA_COLUMNS if cuda else ()
    if memory:
        extra_columns += _CPU_MEMORY_COLUMNS + (_CUDA_MEMORY_COLUMNS if cuda else ())
    rows = []
    for event in events:
        row: dict[str, Any] = {"op_name": event.key, **_columns(event, _CPU_COLUMNS)}
        row["calls"] = int(event.count)
        row.update(_columns(event, extra_columns))
        rows.append(row)
    sort_key = "self_cuda_time_ms" if cuda else "self_time_ms"
    rows.sort(key=lambda row: row[sort_key], reverse=True)
    return rows


def write_op_stats(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write op_stats rows as CSV (header only when there are no rows)."""
    columns = list(rows[0]) if rows else ["op_name", "self_time_ms", "total_time_ms", "calls"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})


class TorchTraceRecorder:
    """Drives one torch.profiler over training steps; see the module docstring.

    Call `on_step_begin(step)` / `on_step_end(step)` around each step and
    `close()` at the end (it writes a cycle cut short). `written` lists the
    step directories produced so far.
    """

    def __init__(self, profile_dir: Path, schedule: TraceSchedule) -> None:
        self.profile_dir = Path(profile_dir)
        self.schedule = schedule
        self.written: list[Path] = []
        self.step_traced = False  # the step under way runs under the profiler (warm-up or record)
        self.export_seconds = 0.0  # time spent writing traces and tables (the profiler's cost)
        self._prof: Any = None
        self._cuda = False
        self._recorded_steps: list[int] = []
        self._cycles_done = 0
        self._export_failed = False
        self._profiler_enabled: Callable[[], bool] = lambda: False
        self._state = "idle"  # idle -> running -> done | failed

    @property
    def active(self) -> bool:
        """Whether the recorder may still record (not finished, not failed)."""
        return self._state in ("idle", "running")

    def on_step_begin(self, step: int) -> None:
        self.step_traced = False
        if self._state == "idle":
            self._guard(self._start)
        if self._state != "running":
            return
        action = getattr(self._prof.current_action, "name", "")
        self.step_traced = action not in ("", "NONE")
        if action == "NONE" and self._profiler_enabled():
            self._give_way()  # in NONE state stop() has nothing to stop
            return
        # ProfilerAction.RECORD / RECORD_AND_SAVE: this step ends up in the trace.
        if action.startswith("RECORD"):
            self._recorded_steps.append(step)

    def on_step_end(self, step: int) -> None:
        if self._state != "running":
            return
        self._guard(self._prof.step)
        if self._state != "running":
            return
        if self._export_failed:
            self._finish()  # safe now: step() has completed its transition
            self._state = "failed"
        elif self.schedule.repeat and self._cycles_done >= self.schedule.repeat:
            self._finish()

    def close(self) -> None:
        if self._state == "running":
            self._finish()

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self._cuda = bool(torch.cuda.is_available())
        activities = [ProfilerActivity.CPU]
        if self._cuda:
            activities.append(ProfilerActivity.CUDA)
        self._profiler_enabled = torch._C._autograd._profiler_enabled
        if self._profiler_enabled():
            self._give_way()
            return
        plan = self.schedule
        self._prof = profile(
            activities=activities,
            schedule=schedule(
                wait=plan.wait,
                warmup=plan.warmup,
                active=plan.active,
                repeat=plan.repeat,
                skip_first=plan.skip_first,
            ),
            on_trace_ready=self._on_trace_ready,
            record_shapes=plan.record_shapes,
            profile_memory=plan.profile_memory,
            with_stack=plan.with_stack,
        )
        self._prof.start()
        self._state = "running"

    def _give_way(self) -> None:
        # Not in a session of ours, yet a profiler is on: the user's own.
        # Starting ours would end theirs, so ours gives way for good.
        logger.warning("another torch profiler is running; scheduled traces are off")
        self._finish()
        self._state = "failed"

    def _finish(self) -> None:
        prof, self._prof = self._prof, None
        self._state = "done"
        if prof is not None:
            # stop() in a recording phase calls _on_trace_ready with what it has.
            self._guard(prof.stop)

    def _on_trace_ready(self, prof: Any) -> None:
        steps, self._recorded_steps = self._recorded_steps, []
        self._cycles_done += 1
        started = time.perf_counter()
        try:
            self._export(prof, steps)
        except Exception:
            # Raising here would leave torch's profiler half-way through a state
            # change, and stopping it then crashes the process (segfault): note
            # the failure and stop the profiler after step() has returned.
            if not self._export_failed:
                logger.warning(
                    "torch.profiler failed to write its trace; profiling traces are off",
                    exc_info=True,
                )
            self._export_failed = True
        finally:
            self.export_seconds += time.perf_counter() - started

    def _export(self, prof: Any, steps: list[int]) -> None:
        first = steps[0] if steps else self._cycles_done
        target = self.profile_dir / f"step_{first}"
        target.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(target / "trace.json"))
        rows = op_stats_rows(
            prof.key_averages(), cuda=self._cuda, memory=self.schedule.profile_memory
        )
        write_op_stats(target / "op_stats.csv", rows)
        self.written.append(target)
        logger.info("torch.profiler trace of steps %s written to %s", steps, target)

    def _guard(self, action: Any) -> None:
        try:
            action()
        except Exception:
            # Degrade, once: the trainer's loop must never see a profiler error.
            # The profiler is dropped, not stopped: after a failed start (another
            # profiler running) or a failed transition, stop() would act on
            # state that is not ours, or crash.
            logger.warning("torch.profiler failed; profiling traces are off", exc_info=True)
            self._state = "failed"
            self._prof = None
