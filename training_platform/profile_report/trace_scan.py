"""A Chrome/Perfetto trace (`trace.json`) read as a stream of events, never whole.

torch.profiler writes ``{"schemaVersion": ..., "traceEvents": [{...}, ...], ...}``;
the plain array form ``[{...}, ...]`` is read too. Events are decoded one at
a time from a bounded buffer, so memory stays flat however large the file,
and reading stops at `max_bytes` (the report then says it stopped there).
What is kept: counts, per-operator totals and self times (CPU ops), the
profiled steps (``ProfilerStep#N`` spans), GPU kernels, and host-device
synchronisations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_EVENT_BYTES = 1 << 20  # one event larger than this: the trace is broken
MAX_SELF_TIME_EVENTS = 500_000  # CPU ops kept for self times (about 100 bytes each)
# Calls that make the host wait for the device (CUDA runtime), and the op behind
# `.item()` / `.tolist()` / `if tensor:`, which waits for the device's result.
SYNC_RUNTIME = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item")
_DECODER = json.JSONDecoder()


class TraceError(Exception):
    """The trace cannot be read: not JSON, no events list, truncated."""


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


def scan_trace(chunks: Iterable[bytes], max_bytes: int) -> TraceSummary:
    """Read a trace's events from `chunks` (up to `max_bytes`); TraceError if it is broken."""
    summary = TraceSummary()
    intervals: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for event in _events(chunks, max_bytes, summary):
        summary.events += 1
        if isinstance(event, dict):
            _account(event, summary, intervals)
    if summary.events == 0:
        raise TraceError("the trace has no events")
    _self_times(intervals, summary)
    return summary


def _events(chunks: Iterable[bytes], max_bytes: int, summary: TraceSummary) -> Iterable[Any]:
    iterator = iter(chunks)
    buffer = ""
    position = 0
    eof = False
    decoder = _Utf8()

    def more() -> bool:
        nonlocal buffer, position, eof
        if eof:
            return False
        if summary.bytes_read >= max_bytes:
            summary.complete = False
            eof = True
            return False
        chunk = next(iterator, None)
        if chunk is None:
            eof = True
            buffer = buffer[position:] + decoder.finish()
            position = 0
            return False
        chunk = chunk[: max_bytes - summary.bytes_read]
        summary.bytes_read += len(chunk)
        buffer = buffer[position:] + decoder.feed(chunk)
        position = 0
        return True

    def skip_space() -> str | None:
        nonlocal position
        while True:
            while position < len(buffer) and buffer[position] in " \t\r\n,":
                position += 1
            if position < len(buffer):
                return buffer[position]
            if not more():
                return None

    # Find the events array: the document itself, or the value of "traceEvents".
    first = skip_space()
    if first is None:
        raise TraceError("the trace is empty")
    if first == "{":
        while (found := buffer.find('"traceEvents"', position)) < 0:
            position = max(position, len(buffer) - 16)
            if not more():
                raise TraceError("no traceEvents list in the trace")
        position = found + len('"traceEvents"')
        while (char := skip_space()) == ":":
            position += 1
        if char != "[":
            raise TraceError("traceEvents is not a list")
    elif first != "[":
        raise TraceError("not a Chrome trace (neither an object nor a list)")
    position += 1
    while True:
        char = skip_space()
        if char is None:
            if summary.complete:
                raise TraceError(f"the trace is truncated after {summary.events:,} events")
            return
        if char == "]":
            return
        while True:
            try:
                event, end = _DECODER.raw_decode(buffer, position)
                break
            except json.JSONDecodeError as exc:
                if len(buffer) - position > MAX_EVENT_BYTES:
                    raise TraceError(f"malformed event after {summary.events:,} events") from exc
                if not more():
                    if not summary.complete:
                        return  # cut by the cap in the middle of an event
                    raise TraceError(
                        f"the trace is truncated or malformed after {summary.events:,} events"
                    ) from exc
        position = end
        yield event


class _Utf8:
    """Incremental UTF-8 decoding (a character may straddle two chunks)."""

    def __init__(self) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return str(self._decoder.decode(data))

    def finish(self) -> str:
        return str(self._decoder.decode(b"", final=True))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _account(
    event: dict[str, Any],
    summary: TraceSummary,
    intervals: dict[tuple[Any, Any], list[tuple[float, float, str]]],
) -> None:
    if event.get("ph") != "X":
        return
    name = event.get("name")
    duration = _number(event.get("dur"))
    start = _number(event.get("ts"))
    if not isinstance(name, str) or duration is None or start is None:
        return
    category = event.get("cat")
    if name.startswith("ProfilerStep#"):
        step = name.partition("#")[2]
        if step.isdigit():
            summary.steps.append(int(step))
        summary.step_us += duration
        return
    if category == "kernel":
        summary.kernels += 1
        summary.kernel_us += duration
    elif category == "cuda_runtime" and name in SYNC_RUNTIME:
        summary.sync_calls += 1
        summary.sync_us += duration
    elif category == "cpu_op":
        if name in SYNC_OPS:
            summary.item_calls += 1
        op = summary.ops.get(name)
        if op is None:
            op = summary.ops[name] = [0.0, 0.0, 0.0]
        op[0] += 1
        op[1] += duration
        op[2] += duration  # self time: children are taken off in `_self_times`
        thread = intervals.get((event.get("pid"), event.get("tid")))
        if thread is None:
            thread = intervals[(event.get("pid"), event.get("tid"))] = []
        if summary.kept_spans < MAX_SELF_TIME_EVENTS:
            summary.kept_spans += 1
            thread.append((start, duration, name))
        else:
            summary.self_times_partial = True


def _self_times(
    intervals: dict[tuple[Any, Any], list[tuple[float, float, str]]], summary: TraceSummary
) -> None:
    """Take each op's direct children's time off its self time (per thread, by nesting)."""
    for spans in intervals.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
        stack: list[tuple[float, str]] = []  # (end, name) of the open ops
        for start, duration, name in spans:
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                summary.ops[stack[-1][1]][2] -= duration
            stack.append((start + duration, name))
