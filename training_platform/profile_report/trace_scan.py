"""What a trace (`trace.json`) says: steps, operator self times, kernels, host-device syncs.

The events come from `trace_events.TraceStream` a batch at a time (memory
stays flat, reading stops at `max_bytes` and the report then says so). What
is kept: counts, per-operator totals and self times (CPU ops), the profiled
steps (``ProfilerStep#N`` spans), GPU kernels, and host-device
synchronisations. `should_stop` is asked between batches (about one per
chunk read), so a report nobody waits for any more stops within a chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from training_platform.profile_report.trace_events import MAX_EVENT_BYTES, TraceError, TraceStream

__all__ = ["MAX_EVENT_BYTES", "ScanCancelled", "TraceError", "TraceSummary", "scan_trace"]

MAX_SELF_TIME_EVENTS = 500_000  # CPU ops kept for self times (about 100 bytes each)
# Calls that make the host wait for the device (CUDA runtime), and the op behind
# `.item()` / `.tolist()` / `if tensor:`, which waits for the device's result.
SYNC_RUNTIME = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"})
# `aten::item` calls `aten::_local_scalar_dense`, which does the copy: counting
# both counted every .item() twice (seen in a real H200 trace).
SYNC_OPS = frozenset({"aten::_local_scalar_dense"})
# torch copies each ProfilerStep span onto the GPU's timeline under this
# category: counted too, a 2-step trace said 4 steps.
GPU_STEP_COPY = "gpu_user_annotation"
_NUMBERS = (int, float)  # compared by `type(...)`: a bool is not a time
_START_THEN_LONGEST = itemgetter(0, 1)  # spans are (start, -duration, name)
_NO_THREAD = object()
_Span = tuple[float, float, str]


class ScanCancelled(Exception):
    """`should_stop` said so: nobody waits for this scan any more."""


@dataclass
class TraceSummary:
    events: int = 0
    bytes_read: int = 0
    complete: bool = True  # False: reading stopped at the byte cap
    steps: list[int] = field(default_factory=list)  # ProfilerStep#N seen
    step_us: float = 0.0  # total duration of the ProfilerStep spans
    kernels: int = 0
    kernel_us: float = 0.0
    sync_calls: int = 0
    sync_us: float = 0.0
    item_calls: int = 0
    runtime_calls: int = 0  # CUDA runtime events: the trace saw the host-device traffic itself
    ops: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, total_us, self_us]
    self_times_partial: bool = False
    kept_spans: int = 0

    def top_ops(self, limit: int = 15) -> list[dict[str, Any]]:
        ranked = sorted(self.ops.items(), key=lambda item: item[1][2], reverse=True)[:limit]
        return [
            {
                "op_name": name,
                "calls": int(calls),
                "self_time_ms": self_us / 1000.0,
                "total_time_ms": total_us / 1000.0,
            }
            for name, (calls, total_us, self_us) in ranked
        ]


def scan_trace(
    chunks: Iterable[bytes],
    max_bytes: int,
    should_stop: Callable[[], bool] | None = None,
) -> TraceSummary:
    """Read a trace's events from `chunks` (up to `max_bytes`); TraceError if it is broken.

    ScanCancelled when `should_stop()` turns true (checked between batches).
    """
    summary = TraceSummary()
    spans: dict[Any, list[_Span]] = {}
    stream = TraceStream(chunks, max_bytes)
    for batch in stream.batches():
        if should_stop is not None and should_stop():
            raise ScanCancelled("the scan was stopped: nobody waits for it")
        _account(batch, summary, spans)
    summary.events = stream.events
    summary.bytes_read = stream.bytes_read
    summary.complete = stream.complete
    if summary.events == 0:
        raise TraceError("the trace has no events")
    _self_times(spans, summary)
    return summary


def _account(events: list[Any], summary: TraceSummary, spans: dict[Any, list[_Span]]) -> None:
    """Add a batch's complete events ("ph": "X") to the summary; CPU ops' spans to `spans`.

    One loop with the counters in locals: this runs for every event of every
    trace, and attribute updates per event cost as much as the decoding.
    Spans are (start, -duration, name): tuples of atoms, which the garbage
    collector stops tracking, where (.., the op's totals list) kept 330k
    tuples of a 51 MB trace under every collection (~30 % more time).
    """
    ops = summary.ops
    steps = summary.steps
    kept = summary.kept_spans
    partial = summary.self_times_partial
    step_us = kernel_us = sync_us = 0.0
    kernels = sync_calls = item_calls = runtime_calls = 0
    # The thread of the previous CPU op: the next one is on it nearly always,
    # and comparing two ids is cheaper than hashing a (pid, tid) key.
    last_pid: Any = _NO_THREAD
    last_tid: Any = _NO_THREAD
    found: list[_Span] = []
    for event in events:
        if type(event) is not dict or event.get("ph") != "X":
            continue
        name: Any = event.get("name")
        duration: Any = event.get("dur")
        start: Any = event.get("ts")
        if type(name) is not str or type(duration) not in _NUMBERS:
            continue
        if type(start) not in _NUMBERS:
            continue
        category = event.get("cat")
        if name.startswith("ProfilerStep#"):
            if category == GPU_STEP_COPY:
                continue
            step = name[13:]
            if step.isdigit():
                steps.append(int(step))
            step_us += duration
        elif category == "cpu_op":
            if name in SYNC_OPS:
                item_calls += 1
            op = ops.get(name)
            if op is None:
                op = ops[name] = [0.0, 0.0, 0.0]
            op[0] += 1
            op[1] += duration
            op[2] += duration  # self time: children are taken off in `_self_times`
            pid = event.get("pid")
            tid = event.get("tid")
            if pid != last_pid or tid != last_tid:
                last_pid, last_tid = pid, tid
                found = _thread_spans(spans, pid, tid)
            if kept < MAX_SELF_TIME_EVENTS:
                kept += 1
                found.append((start, -duration, name))
            else:
                partial = True
        elif category == "kernel":
            kernels += 1
            kernel_us += duration
        elif category == "cuda_runtime":
            runtime_calls += 1
            if name in SYNC_RUNTIME:
                sync_calls += 1
                sync_us += duration
    summary.kept_spans = kept
    summary.self_times_partial = partial
    summary.step_us += step_us
    summary.kernels += kernels
    summary.kernel_us += kernel_us
    summary.sync_calls += sync_calls
    summary.sync_us += sync_us
    summary.item_calls += item_calls
    summary.runtime_calls += runtime_calls


def _thread_spans(spans: dict[Any, list[_Span]], pid: Any, tid: Any) -> list[_Span]:
    thread: Any = (pid, tid)
    try:
        found = spans.get(thread)
    except TypeError:  # a list or an object as pid/tid: compared by its text
        thread = repr(thread)
        found = spans.get(thread)
    if found is None:
        found = spans[thread] = []
    return found


def _self_times(spans: dict[Any, list[_Span]], summary: TraceSummary) -> None:
    """Take each op's direct children's time off its self time (per thread, by nesting)."""
    ops = summary.ops
    for thread in spans.values():
        # Sorted by start, the longer first at the same start (it is the parent);
        # stable, so equal spans keep the file's order.
        thread.sort(key=_START_THEN_LONGEST)
        stack: list[tuple[float, list[float]]] = []  # (end, the op's totals) of the open ops
        for start, negative_duration, name in thread:
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                stack[-1][1][2] += negative_duration
            stack.append((start - negative_duration, ops[name]))
