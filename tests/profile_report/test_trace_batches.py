"""The trace scan decodes a chunk's events in one call, trusts no guessed cut, and stops on
request (issue 23, section 3: a report of 8 x 51 MB traces took 95 s). The speed itself is
measured by benchmarks/bench_profile_report.py, not here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from training_platform.profile_report import trace_events
from training_platform.profile_report.trace_scan import (
    ScanCancelled,
    TraceSummary,
    _account,
    _self_times,
    scan_trace,
)

SUMMARY_FIELDS = (
    "events", "steps", "step_us", "kernels", "kernel_us", "sync_calls", "sync_us",
    "item_calls", "ops", "kept_spans", "self_times_partial",
)  # fmt: skip


def events(count: int = 40) -> list[dict[str, Any]]:
    """Steps with nested ops, kernels, syncs; braces, commas and quotes inside strings and args."""
    out: list[dict[str, Any]] = []
    for n in range(count):
        at = n * 100.0
        out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                    "pid": 1, "tid": 1, "ts": at, "dur": 90.0})  # fmt: skip
        out.append({"ph": "X", "cat": "cpu_op", "name": 'aten::odd"},{"name', "pid": 1,
                    "tid": 1, "ts": at + 1, "dur": 50.0, "args": {"in": {"shape": [1, 2]}},
                    "id": 1})  # fmt: skip
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm}, {", "pid": 1, "tid": 1,
                    "ts": at + 2, "dur": 20, "args": {"Ev Idx": n}})  # fmt: skip
        out.append({"ph": "X", "cat": "kernel", "name": "gemm ünïcode", "pid": 0, "tid": 7,
                    "ts": at + 3, "dur": 5.5})  # fmt: skip
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                    "pid": 1, "tid": 2, "ts": at + 4, "dur": 1})  # fmt: skip
        out.append({"ph": "i", "name": "[memory]", "ts": at, "pid": 1, "tid": 1})
    return out


def reference(trace: list[Any]) -> TraceSummary:
    """The whole list at once through the same accounting: what any chunking must give."""
    summary = TraceSummary(events=len(trace))
    spans: dict[Any, list[Any]] = {}
    _account(trace, summary, spans)
    _self_times(spans, summary)
    return summary


def pieces(body: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def same(scan: TraceSummary, expected: TraceSummary) -> None:
    for name in SUMMARY_FIELDS:
        assert getattr(scan, name) == getattr(expected, name), name


@pytest.mark.parametrize("size", [1, 5, 64, 1000, 1 << 20])
@pytest.mark.parametrize(
    "layout",
    [
        lambda trace: {"traceEvents": trace},
        lambda trace: {"schemaVersion": 1, "traceEvents": trace, "traceName": "x"},
        # After the list, objects again: a cut guessed past its end must not parse.
        lambda trace: {"traceEvents": trace, "deviceProperties": [{"id": 0}, {"id": 1}]},
        lambda trace: trace,
    ],
    ids=["object", "with-tail", "objects-after", "bare-list"],
)
@pytest.mark.parametrize("indent", [None, 2])
def test_any_chunking_gives_the_summary_of_the_whole_list(
    size: int, layout: Any, indent: int | None
) -> None:
    trace = events()
    body = json.dumps(layout(trace), indent=indent, ensure_ascii=False).encode()
    scan = scan_trace(pieces(body, size), max_bytes=1 << 30)
    same(scan, reference(trace))
    assert scan.complete  # (reading stops at the end of the list: bytes_read may be less)


def test_a_chunk_of_events_is_decoded_in_one_call_not_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def loads(data: bytes) -> Any:
        calls.append(len(data))
        return orjson.loads(data)

    monkeypatch.setattr(
        trace_events, "orjson", SimpleNamespace(loads=loads, JSONDecodeError=orjson.JSONDecodeError)
    )
    trace = events(400)  # 2,400 events
    body = json.dumps({"traceEvents": trace}).encode()
    scan = scan_trace(pieces(body, len(body) // 2 + 1), max_bytes=1 << 30)
    assert scan.events == len(trace)
    # Two chunks: one call for each chunk's complete events, one for the event the
    # first chunk cut, one for the last event (no "}," after it).
    assert len(calls) <= 4


def test_a_whole_file_in_one_chunk_is_still_decoded_in_bounded_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def loads(data: bytes) -> Any:
        calls.append(len(data))
        return orjson.loads(data)

    monkeypatch.setattr(
        trace_events, "orjson", SimpleNamespace(loads=loads, JSONDecodeError=orjson.JSONDecodeError)
    )
    body = json.dumps({"traceEvents": events(5000)}).encode()  # ~3 MB
    assert scan_trace([body], max_bytes=1 << 30).events == 30_000
    assert len(calls) >= 3 and max(calls) <= trace_events.MAX_BATCH_BYTES + 2


def test_nan_and_bytes_that_are_not_utf8_are_read_as_the_stdlib_reads_them() -> None:
    body = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::\xff", "pid": 1,'
        b' "tid": 1, "ts": 1, "dur": 2}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1,'
        b' "dur": NaN}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 3}]}'
    )
    scan = scan_trace([body], max_bytes=1 << 20)
    assert scan.events == 3 and "aten::\ufffd" in scan.ops and scan.kernels == 2


def test_a_stop_request_ends_the_scan_at_the_next_chunk() -> None:
    body = json.dumps({"traceEvents": events(200)}).encode()
    pulled: list[int] = []

    def chunks() -> Iterator[bytes]:
        for piece in pieces(body, 1000):
            pulled.append(len(piece))
            yield piece

    with pytest.raises(ScanCancelled):
        scan_trace(chunks(), max_bytes=1 << 30, should_stop=lambda: len(pulled) >= 3)
    assert len(pulled) <= 4 < len(body) // 1000


def test_unhashable_thread_ids_are_not_an_error() -> None:
    trace = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": [1], "tid": {"a": 1},
              "ts": 1, "dur": 2}]  # fmt: skip
    assert scan_trace([json.dumps(trace).encode()], max_bytes=1 << 20).ops["op"] == [1, 2, 2]
