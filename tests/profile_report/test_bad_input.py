"""Bad profiles: truncated or malformed traces and tables, empty and old profiles, huge traces."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.profile_report.demo_profile import stage_times
from training_platform.profile_report import LocalProfileSource, build_report
from training_platform.profile_report.op_table import OpTableError, read_op_table
from training_platform.profile_report.trace_scan import TraceError, scan_trace

OP_HEADER = "op_name,self_time_ms,total_time_ms,calls\n"


def trace_events(steps: int = 2, ops_per_step: int = 3) -> list[dict[str, Any]]:
    """ProfilerStep spans, each holding a parent op with one nested child op."""
    events: list[dict[str, Any]] = []
    for step in range(steps):
        start = step * 1000.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step + 7}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 900.0,
            }
        )
        for op in range(ops_per_step):
            at = start + op * 200.0
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::linear",
                    "pid": 1,
                    "tid": 1,
                    "ts": at,
                    "dur": 100.0,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": at + 10,
                    "dur": 70.0,
                }
            )
    events.append({"ph": "i", "name": "[memory]", "ts": 1.0, "pid": 1, "tid": 1})
    return events


def write_profile(
    root: Path,
    *,
    summary: Any = None,
    trace: bytes | None = None,
    ops: str | None = OP_HEADER + "aten::mm,0.42,0.42,6\n",
) -> Path:
    (root / "step_7").mkdir(parents=True)
    data = stage_times(traces=["step_7"]) if summary is None else summary
    (root / "stage_times.json").write_text(json.dumps(data) if not isinstance(data, str) else data)
    body = json.dumps({"schemaVersion": 1, "traceEvents": trace_events()}).encode()
    (root / "step_7" / "trace.json").write_bytes(body if trace is None else trace)
    if ops is not None:
        (root / "step_7" / "op_stats.csv").write_text(ops)
    return root


def report_of(root: Path, **options: Any) -> dict[str, Any]:
    return build_report(LocalProfileSource(root), **options)


def problems_of(root: Path, **options: Any) -> list[str]:
    return [f"{p['path']}: {p['problem']}" for p in report_of(root, **options)["problems"]]


def test_a_good_synthetic_profile_has_no_problem_and_exact_self_times(tmp_path: Path) -> None:
    report = report_of(write_profile(tmp_path / "p"))
    assert report["problems"] == [] and report["ok"]
    scan = report["traces"][0]["scan"]
    assert scan["steps"] == [7, 8] and scan["step_us"] == 1800.0
    ops = {row["op_name"]: row for row in scan["top_ops"]}
    # 6 calls of linear (100 us each) with mm (70 us) inside: self 30 us each.
    assert ops["aten::linear"]["self_time_ms"] == pytest.approx(0.18)
    assert ops["aten::linear"]["total_time_ms"] == pytest.approx(0.6)
    assert ops["aten::mm"]["self_time_ms"] == pytest.approx(0.42)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_trace_is_streamed_in_any_chunking_with_the_same_result(chunk: int) -> None:
    events = trace_events(steps=3)
    events[1]["name"] = "aten::ünïcode"  # a character split across chunks
    body = json.dumps({"traceEvents": events, "traceName": "x"}, ensure_ascii=False).encode()
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
    scan = scan_trace(iter(pieces), max_bytes=1 << 30)
    assert scan.events == len(events) and scan.steps == [7, 8, 9] and scan.complete
    assert "aten::ünïcode" in scan.ops


def test_a_bare_event_array_is_a_trace_too() -> None:
    scan = scan_trace([json.dumps(trace_events()).encode()], max_bytes=1 << 20)
    assert scan.steps == [7, 8]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "the trace is empty"),
        (b'{"schemaVersion": 1}', "no traceEvents list in the trace"),
        (b'{"traceEvents": {}}', "traceEvents is not a list"),
        (b'{"traceEvents": []}', "the trace has no events"),
        (b"<html>", "not a Chrome trace (neither an object nor a list)"),
        (
            b'{"traceEvents": [{"ph": "X"}, {"ph": "X", "na',
            "the trace is truncated or malformed after 1 events",
        ),
        (b'{"traceEvents": [{"ph": "X"}, {"ph": "X"}', "the trace is truncated after 2 events"),
        (
            b'{"traceEvents": [{"ph": "X"}, nonsense]}',
            "the trace is truncated or malformed after 1 events",
        ),
    ],
)
def test_broken_traces_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(TraceError, match=re.escape(message)):
        scan_trace([body], max_bytes=1 << 20)


def test_a_truncated_trace_is_a_problem_of_its_file(tmp_path: Path) -> None:
    good = json.dumps({"traceEvents": trace_events()}).encode()
    root = write_profile(tmp_path / "p", trace=good[: len(good) // 2])
    assert problems_of(root) == [
        "step_7/trace.json: the trace is truncated or malformed after 7 events"
    ]


def test_a_trace_over_the_cap_is_skipped_and_said_so(tmp_path: Path) -> None:
    events = trace_events(steps=200)  # ~100 kB
    root = write_profile(tmp_path / "p", trace=json.dumps({"traceEvents": events}).encode())
    report = report_of(root, max_trace_bytes=20_000)
    assert report["problems"] == [] and report["traces"][0]["scan"] is None
    assert report["traces"][0]["trace"]["read"] is False
    assert "step_7/trace.json" in report["notes"][0] and "skipped" in report["notes"][0]
    assert report["operators"]["source"] == ["op_stats.csv"]  # the table still answers


def test_the_scanner_stops_at_its_byte_cap_without_reading_on() -> None:
    body = json.dumps({"traceEvents": trace_events(steps=500)}).encode()
    read: list[int] = []

    def chunks() -> Any:
        for i in range(0, len(body), 1000):
            read.append(i)
            yield body[i : i + 1000]

    scan = scan_trace(chunks(), max_bytes=10_000)
    assert not scan.complete and scan.events > 0 and scan.bytes_read == 10_000
    assert len(read) == 10


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("", "step_7/op_stats.csv: empty file (no header)"),
        (
            "op_name,calls\nx,1\n",
            "step_7/op_stats.csv: missing column(s) self_time_ms, total_time_ms"
            " (has: op_name, calls)",
        ),
        (OP_HEADER, "step_7/op_stats.csv: no rows: the profiler recorded no operator"),
        (
            OP_HEADER + "aten::mm,fast,1,1\n",
            "step_7/op_stats.csv: line 2: self_time_ms is 'fast', not a number",
        ),
        (OP_HEADER + "aten::mm,1,1\n", "step_7/op_stats.csv: line 2: 3 fields, the header has 4"),
        (OP_HEADER + "aten::mm,-1,1,1\n", "step_7/op_stats.csv: line 2: a negative time or count"),
    ],
)
def test_bad_op_tables_are_named_precisely(tmp_path: Path, table: str, problem: str) -> None:
    assert problems_of(write_profile(tmp_path / "p", ops=table)) == [problem]


def test_an_op_table_reads_extra_columns_and_a_bom() -> None:
    text = "\ufeff" + OP_HEADER.strip() + ",self_cuda_time_ms\naten::mm,1,2,3,4\n"
    table = read_op_table([text.encode()])
    assert table.rows == [
        {
            "op_name": "aten::mm",
            "self_time_ms": 1.0,
            "total_time_ms": 2.0,
            "calls": 3,
            "self_cuda_time_ms": 4.0,
        }
    ]
    with pytest.raises(OpTableError):
        read_op_table([b"\n"])


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        (
            "{not json",
            "stage_times.json: not valid JSON (Expecting property name enclosed in double quotes:"
            " line 1 column 2 (char 1)): truncated or corrupt",
        ),
        ([], "stage_times.json: the top level is a list, not an object"),
        (
            stage_times(stages={}),
            "stage_times.json: stages is empty: no stage was timed through the kit",
        ),
        (
            stage_times(stages={"rollout": {"count": 3}}),
            "stage_times.json: stages.rollout: total is None, not a number",
        ),
        (
            stage_times(
                stages={"rollout": {"count": 1, "mean": 1, "p50": 1, "p95": 1, "total": -1}}
            ),
            "stage_times.json: stages.rollout: total is negative (-1)",
        ),
        (
            stage_times(version=99),
            "stage_times.json: version 99 is not one this reader knows ((1, 2))",
        ),
        (
            stage_times(traces=["step_7", "step_9"]),
            "step_9: listed in stage_times.json but not in the profile",
        ),
    ],
)
def test_stage_times_shape_problems_are_named(tmp_path: Path, summary: Any, problem: str) -> None:
    assert problem in problems_of(write_profile(tmp_path / "p", summary=summary))


def test_an_empty_or_missing_profile_is_one_problem(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for root in (tmp_path / "empty", tmp_path / "missing"):
        report = report_of(root)
        assert report["problems"] == [
            {"path": "", "problem": "no profile here: the folder is missing or empty"}
        ]
        assert report["recommendations"] == [] and not report["ok"]


def test_a_profile_written_by_the_older_kit_is_read(tmp_path: Path) -> None:
    """Version 1: no version, device, throughput, memory peak/mean, overhead."""
    old = {
        "job_id": "run7",
        "updated_at": 1.0,
        "steps": 30,
        "percentile_window": 10000,
        "cuda_sync": False,
        "step_time": {"count": 30, "mean": 2.0, "p50": 2.0, "p95": 2.1, "total": 60.0},
        "stages": {"rollout": {"count": 30, "mean": 1.5, "p50": 1.5, "p95": 1.6, "total": 45.0}},
        "memory": {"baseline": None, "last": {"rss_gib": 2.0}},
        "traces": ["step_7"],
    }
    report = report_of(write_profile(tmp_path / "p", summary=old))
    assert report["problems"] == [] and report["summary_version"] == 1
    assert report["throughput"] is None and report["memory"]["verdict"] == "unknown"
    assert report["breakdown"]["stages"][0]["share"] == pytest.approx(0.75)
    rules = [rec["rule"] for rec in report["recommendations"]]
    assert rules == ["rollout_generation", "unaccounted_time"]  # 45 of 60 s in the rollout
