"""`stage_times.json` checked and turned into the report's stage, throughput and memory parts.

Both shapes the kit has written are read: version 1 (no ``version`` key:
steps, step_time, stages, memory baseline/last, traces) and version 2, which
adds device, throughput, memory peak/mean/trend/leaks and overhead. What a
version 1 file lacks is reported as missing, not as a problem.
"""

from __future__ import annotations

import math
from typing import Any

STAT_KEYS = ("count", "mean", "p50", "p95", "total")
KNOWN_VERSIONS = (1, 2)


def check_stage_times(data: Any) -> list[str]:
    """What is wrong with the file's shape, each problem one sentence naming the key."""
    if not isinstance(data, dict):
        return [f"the top level is a {type(data).__name__}, not an object"]
    problems: list[str] = []
    version = data.get("version", 1)
    if version not in KNOWN_VERSIONS:
        problems.append(f"version {version!r} is not one this reader knows ({KNOWN_VERSIONS})")
    steps = data.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        problems.append(f"steps is {steps!r}, not a count")
    stages = data.get("stages")
    if not isinstance(stages, dict):
        problems.append(f"stages is {type(stages).__name__}, not an object of stages")
    else:
        for name, stats in stages.items():
            problems.extend(f"stages.{name}: {p}" for p in _check_stats(stats))
        if not stages:
            problems.append("stages is empty: no stage was timed through the kit")
    step_time = data.get("step_time")
    if step_time is not None:
        problems.extend(f"step_time: {p}" for p in _check_stats(step_time))
    traces = data.get("traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, str) for t in traces):
        problems.append("traces is not a list of step folder names")
    memory = data.get("memory")
    if memory is not None and not isinstance(memory, dict):
        problems.append("memory is not an object")
    return problems


def _check_stats(stats: Any) -> list[str]:
    if not isinstance(stats, dict):
        return [f"a {type(stats).__name__}, not an object of statistics"]
    problems = []
    for key in STAT_KEYS:
        value = stats.get(key)
        if value is None and key in ("p50", "p95", "mean"):
            continue  # no finite value (written as null): allowed
        number = _num(value)
        if number is None:
            problems.append(f"{key} is {value!r}, not a number")
        elif number < 0:
            problems.append(f"{key} is negative ({value})")
    return problems


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _num(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def stage_breakdown(data: dict[str, Any]) -> dict[str, Any]:
    """Per stage: mean, p50, p95, total (s), share of the step; the step; what no stage covers.

    A nested stage (``update/actor``) is inside its parent: shares of
    top-level stages add up to at most the whole step, and the rest is
    ``unaccounted``. Without step times, the top-level stages' sum stands in.
    """
    stages_in = data.get("stages") if isinstance(data.get("stages"), dict) else {}
    assert isinstance(stages_in, dict)
    step = data.get("step_time") if isinstance(data.get("step_time"), dict) else None
    usable = {
        name: stats
        for name, stats in stages_in.items()
        if isinstance(name, str) and name and not _check_stats(stats)
    }
    top_total = sum(float(stats["total"]) for name, stats in usable.items() if "/" not in name)
    step_total = _num(step.get("total")) if step else None
    denominator = step_total if step_total else top_total
    rows = []
    for name, stats in usable.items():
        total = float(stats["total"])
        rows.append(
            {
                "stage": name,
                "depth": name.count("/"),
                "count": int(stats["count"]),
                "mean": _num(stats.get("mean")),
                "p50": _num(stats.get("p50")),
                "p95": _num(stats.get("p95")),
                "total": total,
                "share": total / denominator if denominator else None,
            }
        )
    rows.sort(key=lambda row: _tree_key(str(row["stage"]), usable))
    unaccounted = None
    if step_total:
        unaccounted = max(step_total - top_total, 0.0)
    return {
        "steps": data.get("steps"),
        "step_time": {
            **{key: _num(step.get(key)) for key in STAT_KEYS},
            "count": int(step["count"]),
        }
        if step and _is_number(step.get("count"))
        else None,
        "stages": rows,
        "unaccounted": unaccounted,
        "unaccounted_share": unaccounted / step_total
        if unaccounted is not None and step_total
        else None,
    }


def _tree_key(name: str, stages: dict[str, Any]) -> tuple[Any, ...]:
    """Parents before their children, siblings by total time (largest first)."""
    parts = name.split("/")
    key: list[Any] = []
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        total = stages.get(prefix, {}).get("total", 0.0)
        key.append((-float(total) if _is_number(total) else 0.0, prefix))
    return tuple(key)


def throughput_part(data: dict[str, Any]) -> dict[str, Any] | None:
    throughput = data.get("throughput")
    if not isinstance(throughput, dict):
        return None  # version 1: per-step rates are in the records only
    return {key: _num(throughput.get(key)) for key in throughput}


def memory_part(data: dict[str, Any]) -> dict[str, Any] | None:
    """Baseline, peak, mean and last (GiB), the fitted trend and the leak verdict."""
    memory = data.get("memory")
    if not isinstance(memory, dict):
        return None
    trends = memory.get("trend") if isinstance(memory.get("trend"), dict) else {}
    assert isinstance(trends, dict)
    leaks = [leak for leak in memory.get("leaks") or [] if isinstance(leak, dict)]
    verdicts = {name: leak_verdict(fit) for name, fit in trends.items() if isinstance(fit, dict)}
    leaking = bool(leaks) or any(v["leak"] for v in verdicts.values())
    return {
        "baseline": memory.get("baseline"),
        "peak": memory.get("peak"),
        "mean": memory.get("mean"),
        "last": memory.get("last"),
        "samples": memory.get("samples"),
        "trend": trends,
        "leaks": leaks,
        "verdict": "leak" if leaking else ("no leak" if verdicts else "unknown"),
        "series_verdicts": verdicts,
    }


LEAK_MIN_GROWTH_MIB = 64.0  # the kit's own thresholds (callbacks/profiling/memory.py)
LEAK_MIN_R_SQUARED = 0.8


def leak_verdict(fit: dict[str, Any]) -> dict[str, Any]:
    slope = _num(fit.get("slope_mib_per_step")) or 0.0
    r_squared = _num(fit.get("r_squared")) or 0.0
    span = (_num(fit.get("to_step")) or 0.0) - (_num(fit.get("from_step")) or 0.0)
    growth = slope * span
    return {
        "leak": growth >= LEAK_MIN_GROWTH_MIB and r_squared >= LEAK_MIN_R_SQUARED,
        "growth_mib": growth,
        "slope_mib_per_step": slope,
        "r_squared": r_squared,
        "steps": span,
    }
