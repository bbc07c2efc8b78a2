"""Recommendations: each rule reads the report and, when it fires, says why with its numbers.

Every rule is a function ``(report) -> Recommendation | None``; the
thresholds are the module's constants, documented in docs/profiling.md
("Recommendations"). A recommendation carries the rule's id, a severity
(``warning``: time or memory is being lost; ``info``: worth knowing), a
one-line title, what to try, and ``evidence``: the figures that triggered it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Recommendation = dict[str, Any]

DATA_LOADING_SHARE = 0.20
ROLLOUT_SHARE = 0.50
OPTIMIZER_SHARE = 0.20
HEADROOM_USED_BELOW = 0.50  # peak under half the device: a larger batch likely fits
SYNC_PER_STEP = 5.0
SYNC_TIME_SHARE = 0.05
STRAGGLER_RATIO = 2.0  # p95 at least this many times the median
STRAGGLER_MIN_STEPS = 20
STRAGGLER_MIN_SHARE = 0.05
UNACCOUNTED_SHARE = 0.25
TRACE_SLOWDOWN = 1.5
LARGEST_STAGE_SHARE = 0.30

_DATA = re.compile(r"data|load|fetch|collate|batch", re.IGNORECASE)
_ROLLOUT = re.compile(r"rollout|generat|sampl|inference", re.IGNORECASE)
_OPTIMIZER = re.compile(r"optim", re.IGNORECASE)


def _stages(report: dict[str, Any]) -> list[dict[str, Any]]:
    breakdown = report.get("breakdown") or {}
    return list(breakdown.get("stages") or [])


def _share_of(
    report: dict[str, Any], pattern: re.Pattern[str], *, top_only: bool
) -> tuple[float, list[str]]:
    """Summed share of the stages whose own name matches (not adding a matched stage's children)."""
    matched: list[str] = []
    share = 0.0
    for row in _stages(report):
        name = row["stage"]
        if top_only and row["depth"]:
            continue
        if any(name.startswith(parent + "/") for parent in matched):
            continue
        if pattern.search(name.rsplit("/", 1)[-1]) and row["share"] is not None:
            matched.append(name)
            share += row["share"]
    return share, matched


def _pct(value: float) -> str:
    return f"{value * 100:.0f} %"


def _stage_share(
    report: dict[str, Any],
    rule: str,
    pattern: re.Pattern[str],
    threshold: float,
    what: str,
    detail: str,
) -> Recommendation | None:
    """The rules of one kind: the stages named like `pattern` take `threshold` of the step."""
    share, stages = _share_of(report, pattern, top_only=False)
    if share < threshold:
        return None
    return {
        "rule": rule,
        "severity": "warning",
        "title": f"{what} takes {_pct(share)} of the step",
        "detail": detail,
        "evidence": {"stages": stages, "share": share, "threshold": threshold},
    }


def data_loading(report: dict[str, Any]) -> Recommendation | None:
    return _stage_share(
        report, "data_loading", _DATA, DATA_LOADING_SHARE, "Data loading",
        "Load ahead of the step: DataLoader(num_workers>0, pin_memory=True, "
        "prefetch_factor), pre-tokenise the dataset, or overlap loading with the previous step.",
    )  # fmt: skip


def rollout_generation(report: dict[str, Any]) -> Recommendation | None:
    return _stage_share(
        report, "rollout_generation", _ROLLOUT, ROLLOUT_SHARE, "Rollout generation",
        "Generation bounds the step: a serving engine (vLLM, SGLang) for rollouts, "
        "larger generation batches, a shorter max response length, or asynchronous rollouts "
        "that overlap the update.",
    )  # fmt: skip


def optimizer_step(report: dict[str, Any]) -> Recommendation | None:
    return _stage_share(
        report, "optimizer_step", _OPTIMIZER, OPTIMIZER_SHARE, "The optimizer step",
        "Use a fused or foreach optimizer (torch.optim.AdamW(fused=True)), fewer "
        "parameter groups, and avoid CPU offload of the optimizer state when memory allows; "
        "gradient accumulation amortises it over more samples.",
    )  # fmt: skip


def memory_headroom(report: dict[str, Any]) -> Recommendation | None:
    device = report.get("device") or {}
    memory = report.get("memory") or {}
    total = device.get("total_gib")
    peaks = memory.get("peak") or {}
    key = f"cuda:{device.get('index', 0)}"
    peak_figures = peaks.get(key) if isinstance(peaks.get(key), dict) else None
    if device.get("type") != "cuda" or not total or not peak_figures:
        return None
    peak = peak_figures.get("peak_gib") or peak_figures.get("reserved_gib")
    if not peak or peak / total >= HEADROOM_USED_BELOW:
        return None
    baseline = ((memory.get("baseline") or {}).get(key) or {}).get("allocated_gib") or 0.0
    per_batch = max(peak - baseline, 1e-9)
    factor = max((0.9 * total - baseline) / per_batch, 1.0)
    return {
        "rule": "memory_headroom",
        "severity": "info",
        "title": f"Peak memory is {_pct(peak / total)} of {key}: room for a larger batch",
        "detail": f"Activations and optimizer state above the model take {per_batch:.2f} GiB; "
        f"about {factor:.1f}x the batch (or micro-batch) would still fit in 90 % of the device. "
        "A larger batch raises throughput; check it with a short profiled run.",
        "evidence": {
            "peak_gib": peak,
            "total_gib": total,
            "baseline_gib": baseline,
            "batch_factor": factor,
            "threshold": HEADROOM_USED_BELOW,
        },
    }


def memory_leak(report: dict[str, Any]) -> Recommendation | None:
    memory = report.get("memory") or {}
    if memory.get("verdict") != "leak":
        return None
    fits = {name: v for name, v in (memory.get("series_verdicts") or {}).items() if v["leak"]}
    leaks = memory.get("leaks") or []
    name, fit = next(iter(fits.items()), (None, None))
    growth = f"{name} grows {fit['slope_mib_per_step']:.2f} MiB/step" if fit else "memory grows"
    return {
        "rule": "memory_leak",
        "severity": "warning",
        "title": f"Memory leak: {growth}",
        "detail": "Memory climbs steadily step after step. Usual causes: tensors kept across "
        "steps (a loss appended to a list without .item()/.detach(), rollout buffers that "
        "are never cleared, a growing cache); compare two torch.cuda.memory_snapshot()s.",
        "evidence": {"fits": fits, "anomalies": leaks[-3:]},
    }


def host_device_sync(report: dict[str, Any]) -> Recommendation | None:
    traces = report.get("traces") or []
    device = report.get("device") or {}
    calls = sync_us = step_us = steps = kernels = 0.0
    for trace in traces:
        scan = trace.get("scan")
        if not scan:
            continue
        # With the CUDA runtime traced, its synchronise calls are the syncs: an
        # .item() of a GPU tensor is one of them, and one of a CPU tensor (the
        # optimizer's step counters) waits for nothing. Without it, the .item()
        # calls are the only evidence.
        if scan.get("runtime_calls"):
            calls += scan["sync_calls"]
        else:
            calls += scan["sync_calls"] + scan["item_calls"]
        sync_us += scan["sync_us"]
        step_us += scan["step_us"]
        steps += max(len(scan["steps"]), 1)
        kernels += scan["kernels"]
    if not steps or (device.get("type") != "cuda" and not kernels):
        return None  # on a CPU, .item() waits for nothing
    per_step = calls / steps
    share = sync_us / step_us if step_us else 0.0
    if per_step < SYNC_PER_STEP and share < SYNC_TIME_SHARE:
        return None
    return {
        "rule": "host_device_sync",
        "severity": "warning",
        "title": f"{per_step:.0f} host-device synchronisations per step",
        "detail": "Each .item(), .tolist(), .cpu(), print(tensor) or `if tensor:` waits for the "
        "GPU to finish. Keep metrics on the device and convert them once per step "
        "(torch.stack(...).tolist()), and avoid torch.cuda.synchronize() in the loop.",
        "evidence": {
            "per_step": per_step,
            "sync_time_share": share,
            "thresholds": {"per_step": SYNC_PER_STEP, "time_share": SYNC_TIME_SHARE},
        },
    }


def stragglers(report: dict[str, Any]) -> Recommendation | None:
    rows = list(_stages(report))
    step = (report.get("breakdown") or {}).get("step_time")
    if step:
        rows.append({**step, "stage": "(whole step)", "share": 1.0})
    slow = []
    for row in rows:
        p50, p95, count = row.get("p50"), row.get("p95"), row.get("count") or 0
        if not p50 or p95 is None or count < STRAGGLER_MIN_STEPS:
            continue
        if (row.get("share") or 0.0) < STRAGGLER_MIN_SHARE:
            continue
        if p95 / p50 >= STRAGGLER_RATIO:
            slow.append({"stage": row["stage"], "p50": p50, "p95": p95, "ratio": p95 / p50})
    if not slow:
        return None
    worst = max(slow, key=lambda item: item["ratio"])
    return {
        "rule": "stragglers",
        "severity": "warning",
        "title": f"Stragglers: {worst['stage']} has p95 {worst['ratio']:.1f}x its median",
        "detail": "Some steps take far longer than usual: variable response lengths (pad or "
        "bucket them), garbage collection, checkpointing or evaluation inside the step, "
        "a slow worker in a collective. The Timing view's slowest steps show which.",
        "evidence": {"stages": slow, "threshold": STRAGGLER_RATIO},
    }


def unaccounted_time(report: dict[str, Any]) -> Recommendation | None:
    breakdown = report.get("breakdown") or {}
    share = breakdown.get("unaccounted_share")
    if share is None or share < UNACCOUNTED_SHARE:
        return None
    return {
        "rule": "unaccounted_time",
        "severity": "info",
        "title": f"{_pct(share)} of the step is in no stage",
        "detail": "Wrap the rest of the step in profiler.stage(...) blocks (logging, "
        "checkpointing, data movement) to see where it goes.",
        "evidence": {
            "share": share,
            "seconds": breakdown.get("unaccounted"),
            "threshold": UNACCOUNTED_SHARE,
        },
    }


def trace_overhead(report: dict[str, Any]) -> Recommendation | None:
    overhead = report.get("overhead") or {}
    traced, other = overhead.get("traced_step_mean"), overhead.get("other_step_mean")
    if not traced or not other or traced / other < TRACE_SLOWDOWN:
        return None
    return {
        "rule": "trace_overhead",
        "severity": "info",
        "title": f"Traced steps ran {traced / other:.1f}x slower than the others",
        "detail": "torch.profiler's cost (more with record_shapes, with_stack, profile_memory): "
        "keep trace windows short and rare; figures of traced steps are inflated.",
        "evidence": {
            "traced_step_mean": traced,
            "other_step_mean": other,
            "threshold": TRACE_SLOWDOWN,
        },
    }


def largest_stage(report: dict[str, Any]) -> Recommendation | None:
    """The one top-level stage that dominates, when no specific rule above named it."""
    rows = [row for row in _stages(report) if not row["depth"] and row["share"] is not None]
    if not rows:
        return None
    top = max(rows, key=lambda row: row["share"])
    if top["share"] < LARGEST_STAGE_SHARE:
        return None
    for pattern, threshold in (
        (_DATA, DATA_LOADING_SHARE),
        (_ROLLOUT, ROLLOUT_SHARE),
        (_OPTIMIZER, OPTIMIZER_SHARE),
    ):
        if pattern.search(top["stage"]) and top["share"] >= threshold:
            return None  # its own rule says more
    return {
        "rule": "largest_stage",
        "severity": "info",
        "title": f"{top['stage']} is the largest stage: {_pct(top['share'])} of the step",
        "detail": "Speeding it up pays most; its operators in the trace (Artifacts) show where "
        "its time goes.",
        "evidence": {
            "stage": top["stage"],
            "share": top["share"],
            "mean_s": top["mean"],
            "threshold": LARGEST_STAGE_SHARE,
        },
    }


RULES: tuple[Callable[[dict[str, Any]], Recommendation | None], ...] = (
    data_loading,
    rollout_generation,
    optimizer_step,
    memory_headroom,
    memory_leak,
    host_device_sync,
    stragglers,
    unaccounted_time,
    trace_overhead,
    largest_stage,
)


def recommend(report: dict[str, Any]) -> list[Recommendation]:
    """Every rule that fires, warnings first."""
    found = [rec for rule in RULES if (rec := rule(report)) is not None]
    return sorted(found, key=lambda rec: rec["severity"] != "warning")
