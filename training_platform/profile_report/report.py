"""`build_report(source)`: a profile's files checked, summarised and turned into recommendations.

Never raises on bad files: each problem is reported with the file it is in
(``problems``), and what was left unread on purpose (a trace over the size
cap, older profiles past `max_profiles`) is said in ``notes``. Errors of the
source itself (a host that cannot be reached) propagate to the caller, and so
does `ScanCancelled` when `should_stop()` turns true (asked between files and
between the batches of a trace).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from training_platform.profile_report.op_table import OpTableError, read_op_table
from training_platform.profile_report.rules import recommend
from training_platform.profile_report.source import (
    ProfileFile,
    ProfileSource,
    TooLargeError,
    read_capped,
)
from training_platform.profile_report.stage_summary import (
    check_stage_times,
    memory_part,
    stage_breakdown,
    throughput_part,
)
from training_platform.profile_report.trace_scan import ScanCancelled, TraceError, scan_trace

REPORT_VERSION = 1
SUMMARY_FILE = "stage_times.json"
MAX_SUMMARY_BYTES = 8 << 20
DEFAULT_MAX_TRACE_BYTES = 1 << 30
DEFAULT_MAX_PROFILES = 8
TOP_OPERATORS = 15
_STEP_DIR = re.compile(r"^step_(\d+)$")
_READ_ERRORS = (OSError, ValueError, TooLargeError, TraceError, OpTableError)


class TraceScans(Protocol):
    """Scans of single traces kept across reports, by file (path, size, mtime)."""

    def get(self, trace: ProfileFile) -> dict[str, Any] | None: ...

    def put(self, trace: ProfileFile, scanned: dict[str, Any]) -> None: ...


def build_report(
    source: ProfileSource,
    *,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    max_profiles: int = DEFAULT_MAX_PROFILES,
    files: list[ProfileFile] | None = None,
    should_stop: Callable[[], bool] | None = None,
    scans: TraceScans | None = None,
) -> dict[str, Any]:
    """The report as JSON-able data (see the package docstring and docs/profiling.md).

    `files`: the source's listing when the caller has it already (the API
    lists once, to know whether a cached report still holds). `scans`: what
    earlier reports read of traces that have not changed since (the API's;
    a training run rewrites `stage_times.json` every 30 s and adds a step's
    trace now and then, and only what changed is read again).
    """
    problems: list[dict[str, str]] = []
    notes: list[str] = []

    def problem(path: str, text: str) -> None:
        problems.append({"path": path, "problem": text})

    if files is None:
        files = source.files()
    for skipped in getattr(source, "skipped", []):
        problem(skipped, "a symbolic link: not read (it could lead outside the profile)")
    if not files:
        problem("", "no profile here: the folder is missing or empty")
    by_path = {file.path: file for file in files}
    summary = _read_summary(source, by_path, problem)

    step_dirs: dict[str, list[ProfileFile]] = {}
    for file in files:
        head, _, rest = file.path.partition("/")
        if rest and _STEP_DIR.match(head):
            step_dirs.setdefault(head, []).append(file)
    listed = summary.get("traces") if summary else None
    if isinstance(listed, list):
        for name in listed:
            if isinstance(name, str) and name not in step_dirs:
                problem(name, f"listed in {SUMMARY_FILE} but not in the profile")
    ordered = sorted(step_dirs, key=lambda name: int(name[5:]), reverse=True)
    if len(ordered) > max_profiles:
        notes.append(
            f"{len(ordered) - max_profiles} older profile(s) not read "
            f"(the newest {max_profiles} are): {', '.join(sorted(ordered[max_profiles:])[:5])}..."
        )
    traces = []
    for name in sorted(ordered[:max_profiles], key=lambda n: int(n[5:])):
        if should_stop is not None and should_stop():
            raise ScanCancelled("the report was stopped: nobody waits for it")
        traces.append(
            _read_profile(
                source, name, step_dirs[name], max_trace_bytes, problem, notes, should_stop, scans
            )
        )

    breakdown = stage_breakdown(summary) if summary else None
    report: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "profile": source.label,
        "generated_at": time.time(),
        "job_id": summary.get("job_id") if summary else None,
        "summary_version": summary.get("version", 1) if summary else None,
        "updated_at": summary.get("updated_at") if summary else None,
        "device": summary.get("device") if summary else None,
        "cuda_sync": summary.get("cuda_sync") if summary else None,
        "breakdown": breakdown,
        "throughput": throughput_part(summary) if summary else None,
        "memory": memory_part(summary) if summary else None,
        "overhead": summary.get("overhead") if summary else None,
        "traces": traces,
        "operators": _merged_operators(traces),
        "problems": problems,
        "notes": notes,
    }
    report["recommendations"] = recommend(report)
    report["ok"] = not problems
    return report


def _read_summary(
    source: ProfileSource, by_path: dict[str, ProfileFile], problem: Any
) -> dict[str, Any] | None:
    if SUMMARY_FILE not in by_path:
        if by_path:
            problem(SUMMARY_FILE, "missing: the profiler writes it every 30 s and on close()")
        return None
    try:
        data = json.loads(read_capped(source, SUMMARY_FILE, MAX_SUMMARY_BYTES))
    except TooLargeError:
        problem(SUMMARY_FILE, f"over {MAX_SUMMARY_BYTES >> 20} MiB: not a summary the kit writes")
        return None
    except (OSError, ValueError) as exc:
        problem(SUMMARY_FILE, f"not valid JSON ({_short(exc)}): truncated or corrupt")
        return None
    for text in check_stage_times(data):
        problem(SUMMARY_FILE, text)
    return data if isinstance(data, dict) else None


def _read_profile(
    source: ProfileSource,
    name: str,
    files: list[ProfileFile],
    max_trace_bytes: int,
    problem: Any,
    notes: list[str],
    should_stop: Callable[[], bool] | None,
    scans: TraceScans | None,
) -> dict[str, Any]:
    present = {file.path.split("/", 1)[1]: file for file in files}
    entry: dict[str, Any] = {
        "name": name,
        "step": int(name[5:]),
        "files": sorted(present),
        "trace": None,
        "scan": None,
        "op_table": None,
    }
    trace = present.get("trace.json")
    if trace is None:
        problem(name, "no trace.json in this profile")
    elif trace.size == 0:
        problem(trace.path, "empty file")
    else:
        entry["trace"] = {"path": trace.path, "size": trace.size, "read": False}
        if trace.size > max_trace_bytes:
            notes.append(
                f"{trace.path}: {trace.size / 2**20:,.0f} MiB, over the "
                f"{max_trace_bytes / 2**20:,.0f} "
                "MiB this report reads: skipped (open it in Perfetto)"
            )
        else:
            try:
                scanned = scans.get(trace) if scans is not None else None
                if scanned is None:
                    scanned = _scan_file(source, trace, max_trace_bytes, should_stop)
                    if scans is not None:
                        scans.put(trace, scanned)
            except _READ_ERRORS as exc:
                problem(trace.path, _short(exc))
            else:
                entry["trace"].update(
                    read=True, events=scanned["events"], complete=scanned["complete"]
                )
                entry["scan"] = scanned["scan"]
                if not scanned["scan"]["steps"]:
                    problem(trace.path, "no ProfilerStep#N span: not a torch.profiler step trace")
    table = present.get("op_stats.csv")
    if table is None:
        problem(name, "no op_stats.csv in this profile")
    else:
        try:
            with _closing(source.open(table.path)) as chunks:
                ops = read_op_table(chunks)
        except _READ_ERRORS as exc:
            problem(table.path, _short(exc))
        else:
            for bad in ops.bad_rows:
                problem(table.path, bad)
            if not ops.rows and not ops.bad_rows:
                problem(table.path, "no rows: the profiler recorded no operator")
            entry["op_table"] = {
                "path": table.path,
                "columns": ops.columns,
                "rows": len(ops.rows),
                "truncated": ops.truncated,
                "top": ops.top(TOP_OPERATORS),
            }
    return entry


def _scan_file(
    source: ProfileSource,
    trace: ProfileFile,
    max_trace_bytes: int,
    should_stop: Callable[[], bool] | None,
) -> dict[str, Any]:
    """What a report keeps of one trace (read-only from here on: `scans` may share it)."""
    with _closing(source.open(trace.path)) as chunks:
        scan = scan_trace(chunks, max_trace_bytes, should_stop)
    return {
        "events": scan.events,
        "complete": scan.complete,
        "scan": {
            "steps": scan.steps,
            "step_us": scan.step_us,
            "kernels": scan.kernels,
            "kernel_us": scan.kernel_us,
            "sync_calls": scan.sync_calls,
            "sync_us": scan.sync_us,
            "item_calls": scan.item_calls,
            "runtime_calls": scan.runtime_calls,
            "top_ops": scan.top_ops(TOP_OPERATORS),
            "self_times_partial": scan.self_times_partial,
        },
    }


def _merged_operators(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The heaviest operators by self time over every profile read (op tables, else traces).

    CPU self time, on a GPU run too: torch's op table gives a user annotation
    (`Optimizer.step#AdamW.step`) the device time of every kernel under it and
    lists each kernel beside the op that launched it, so its device column
    does not add up (seen on a real H200 profile, tests/fixtures/gpu_h200)."""
    merged: dict[str, dict[str, Any]] = {}
    sources = set()
    for trace in traces:
        table, scan = trace.get("op_table"), trace.get("scan")
        if table and table["top"]:
            rows, sources_name = table["top"], "op_stats.csv"
        elif scan and scan["top_ops"]:
            rows, sources_name = scan["top_ops"], "trace.json"
        else:
            continue
        sources.add(sources_name)
        for row in rows:
            if str(row["op_name"]).startswith("ProfilerStep"):
                continue  # the step span itself, not an operator
            into = merged.setdefault(
                row["op_name"],
                {"op_name": row["op_name"], "calls": 0, "self_time_ms": 0.0, "total_time_ms": 0.0},
            )
            into["calls"] += int(row.get("calls") or 0)
            into["self_time_ms"] += float(row.get("self_time_ms") or 0.0)
            into["total_time_ms"] += float(row.get("total_time_ms") or 0.0)
    ranked = sorted(merged.values(), key=lambda row: row["self_time_ms"], reverse=True)
    total = sum(row["self_time_ms"] for row in merged.values())
    for row in ranked:
        row["self_share"] = row["self_time_ms"] / total if total else None
    return {"source": sorted(sources), "top": ranked[:TOP_OPERATORS]}


@contextmanager
def _closing(chunks: Iterator[bytes]) -> Iterator[Iterator[bytes]]:
    """Close a file's stream even when reading stopped early (a cap, an error)."""
    try:
        yield chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
