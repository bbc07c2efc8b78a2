"""The report as text (the terminal, ``report.txt``) and ``summary.csv`` (per-stage totals)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from training_platform.callbacks.profiling.stats import finite_or_none

SUMMARY_COLUMNS = ("stage", "depth", "count", "mean_s", "p50_s", "p95_s", "total_s", "share")


def _s(value: Any, unit: str = "s") -> str:
    if value is None:
        return "–"
    if unit == "s":
        return f"{value * 1000:.2f} ms" if abs(value) < 1 else f"{value:.3f} s"
    if unit == "%":
        return f"{value * 100:.1f} %"
    if unit == "GiB":
        return f"{value:.3f} GiB"
    return f"{value:,.1f}"


def render_text(report: dict[str, Any]) -> str:
    out: list[str] = []
    add = out.append
    add(f"Profile report: {report['profile']}")
    device = report.get("device") or {}
    breakdown = report.get("breakdown") or {}
    if report.get("job_id"):
        add(
            f"job {report['job_id']} · {breakdown.get('steps')} steps · "
            f"stage_times.json version {report.get('summary_version')}"
        )
    if device:
        memory = f", {device['total_gib']:.1f} GiB" if device.get("total_gib") else ""
        add(f"device: {device.get('type')} {device.get('name') or ''}{memory}")
    problems = report["problems"]
    add("")
    add(f"Checks: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    for item in problems:
        add(f"  ✗ {item['path'] or '(profile)'}: {item['problem']}")
    for note in report["notes"]:
        add(f"  · {note}")
    if breakdown.get("stages"):
        add("")
        add("Stage breakdown")
        add(f"  {'stage':<32} {'mean':>10} {'p50':>10} {'p95':>10} {'total':>10} {'share':>8}")
        step = breakdown.get("step_time")
        for row in breakdown["stages"]:
            name = "  " * row["depth"] + row["stage"].rsplit("/", 1)[-1]
            add(
                f"  {name:<32} {_s(row['mean']):>10} {_s(row['p50']):>10} {_s(row['p95']):>10} "
                f"{_s(row['total']):>10} {_s(row['share'], '%'):>8}"
            )
        if breakdown.get("unaccounted") is not None:
            add(
                f"  {'(in no stage)':<32} {'':>10} {'':>10} {'':>10} "
                f"{_s(breakdown['unaccounted']):>10} {_s(breakdown['unaccounted_share'], '%'):>8}"
            )
        if step:
            add(
                f"  {'step':<32} {_s(step['mean']):>10} {_s(step['p50']):>10} "
                f"{_s(step['p95']):>10} "
                f"{_s(step['total']):>10} {'100.0 %':>8}"
            )
    throughput = report.get("throughput")
    if throughput:
        add("")
        add(
            f"Throughput: {_s(throughput.get('samples_per_second'), 'n')} samples/s, "
            f"{_s(throughput.get('tokens_per_second'), 'n')} tokens/s "
            f"(over {throughput.get('samples') or 0:,.0f} samples)"
        )
    _memory_lines(report.get("memory"), add)
    operators = report["operators"]["top"]
    if operators:
        add("")
        add(f"Top operators by self time ({', '.join(report['operators']['source'])})")
        for row in operators[:10]:
            add(
                f"  {row['op_name'][:48]:<48} {row['self_time_ms']:>10.3f} ms "
                f"{_s(row['self_share'], '%'):>8} {row['calls']:>8} calls"
            )
    overhead = report.get("overhead")
    if overhead:
        add("")
        add(
            f"Profiler overhead: trace export {overhead.get('trace_export_seconds') or 0:.3f} s; "
            f"traced steps {_s(overhead.get('traced_step_mean'))} vs "
            f"{_s(overhead.get('other_step_mean'))} the others "
            f"({overhead.get('traced_steps') or 0} traced)"
        )
    add("")
    recommendations = report["recommendations"]
    add(f"Recommendations: {len(recommendations) or 'none'}")
    for rec in recommendations:
        add(f"  [{rec['severity']}] {rec['title']}")
        add(f"      {rec['detail']}")
        for line in evidence_lines(rec["evidence"]):
            add(line)
    return "\n".join(out) + "\n"


EVIDENCE_WIDTH = 96
EVIDENCE_INDENT = "      "
EVIDENCE_LIST_SHOWN = 4


def _evidence_number(value: float) -> str:
    if isinstance(value, int) or (
        math.isfinite(value) and value.is_integer() and abs(value) < 1e15
    ):
        return f"{int(value):,}"
    if not math.isfinite(value):
        return str(value)
    # Four significant digits; "3e-05" written "3e-5".
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{value:.4g}")


def evidence_value(value: Any, depth: int = 0) -> str:
    """One evidence value as text: numbers to four significant digits, dicts as
    "key value, key value", lists joined short or counted (the dashboard's evidence.js)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return _evidence_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        if depth >= 2:
            return f"{len(value)} item{'' if len(value) == 1 else 's'}"
        nested = any(isinstance(item, (dict, list, tuple)) for item in value)
        shown = [evidence_value(item, depth + 1) for item in value[:EVIDENCE_LIST_SHOWN]]
        left = len(value) - EVIDENCE_LIST_SHOWN
        more = f" (+{left} more)" if left > 0 else ""
        return (" | " if nested else ", ").join(shown) + more
    if isinstance(value, dict):
        if not value:
            return "none"
        if depth >= 2:
            return f"{len(value)} value{'' if len(value) == 1 else 's'}"
        return ", ".join(f"{_key(k)} {evidence_value(v, depth + 1)}" for k, v in value.items())
    return str(value)


def _key(key: Any) -> str:
    return str(key).replace("_", " ")


def evidence_lines(
    evidence: Any, width: int = EVIDENCE_WIDTH, indent: str = EVIDENCE_INDENT
) -> list[str]:
    """A recommendation's evidence as "evidence: key value; key value" lines, wrapped
    between words (a number or a name is never cut), never JSON."""
    if isinstance(evidence, dict):
        pieces = [f"{_key(k)} {evidence_value(v)}" for k, v in evidence.items()]
    elif evidence is None:
        pieces = []
    else:
        pieces = [evidence_value(evidence)]
    if not pieces:
        return []
    return textwrap.wrap(
        "; ".join(pieces),
        width=width,
        initial_indent=f"{indent}evidence: ",
        subsequent_indent=f"{indent}  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _memory_lines(memory: dict[str, Any] | None, add: Any) -> None:
    if not memory:
        return
    add("")
    add(f"Memory ({memory.get('samples') or 0} samples), GiB: leak verdict: {memory['verdict']}")
    for label in ("baseline", "peak", "mean", "last"):
        figures = memory.get(label)
        if isinstance(figures, dict) and figures:
            add(f"  {label:<9} {_flat(figures)}")
    for name, verdict in (memory.get("series_verdicts") or {}).items():
        add(
            f"  trend {name}: {verdict['slope_mib_per_step']:+.3f} MiB/step over "
            f"{verdict['steps']:.0f} steps (R²={verdict['r_squared']:.2f}): "
            f"{'LEAK' if verdict['leak'] else 'no leak'}"
        )
    for leak in memory.get("leaks") or []:
        add(f"  ! step {leak.get('step')}: {leak.get('message')}")


def _flat(figures: dict[str, Any]) -> str:
    parts: list[str] = []
    for key, value in figures.items():
        if isinstance(value, dict):
            parts.extend(
                f"{key} {name.removesuffix('_gib')} {v:.3f}"
                for name, v in value.items()
                if isinstance(v, (int, float))
            )
        elif isinstance(value, (int, float)):
            parts.append(f"{key.removesuffix('_gib')} {value:.3f}")
    return ", ".join(parts)


def summary_csv(report: dict[str, Any]) -> str:
    """Per-stage totals, one row per stage (and the whole step last)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SUMMARY_COLUMNS)
    breakdown = report.get("breakdown") or {}
    for row in breakdown.get("stages") or []:
        writer.writerow(
            [
                row["stage"],
                row["depth"],
                row["count"],
                *(_g(row[key]) for key in ("mean", "p50", "p95", "total", "share")),
            ]
        )
    step = breakdown.get("step_time")
    if step:
        writer.writerow(
            [
                "(step)",
                0,
                step.get("count"),
                *(_g(step.get(key)) for key in ("mean", "p50", "p95", "total")),
                "1",
            ]
        )
    return buffer.getvalue()


def _g(value: Any) -> str:
    return "" if value is None else f"{value:.6g}"


def write_report_files(report: dict[str, Any], directory: Path) -> list[Path]:
    """``report.json``, ``report.txt`` and ``summary.csv`` in `directory` (the profile)."""
    written = []
    for name, text in (
        ("report.json", json.dumps(finite_or_none(report), indent=2) + "\n"),
        ("report.txt", render_text(report)),
        ("summary.csv", summary_csv(report)),
    ):
        path = directory / name
        temporary = path.with_name(f".{name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        written.append(path)
    return written
