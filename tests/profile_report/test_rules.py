"""Each recommendation rule, on a profile that should trigger it and one that should not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.profile_report.demo_profile import stage_times, stats
from training_platform.profile_report import LocalProfileSource, build_report

CUDA = {"type": "cuda", "name": "H100", "index": 0, "count": 1, "total_gib": 80.0, "torch": "2.13"}


def rules_for(
    tmp_path: Path, summary: dict[str, Any], trace: list[dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    root = tmp_path / "p"
    root.mkdir(parents=True)
    (root / "stage_times.json").write_text(json.dumps(summary))
    if trace is not None:
        (root / "step_1").mkdir()
        (root / "step_1" / "trace.json").write_text(json.dumps({"traceEvents": trace}))
        (root / "step_1" / "op_stats.csv").write_text(
            "op_name,self_time_ms,total_time_ms,calls\naten::mm,1,1,1\n"
        )
    report = build_report(LocalProfileSource(root))
    return {rec["rule"]: rec for rec in report["recommendations"]}


def stages(**shares: float) -> dict[str, Any]:
    """Stages with these shares of a 1 s step (100 steps)."""
    return {name.replace("__", "/"): stats(share) for name, share in shares.items()}


def gpu_trace(syncs_per_step: int) -> list[dict[str, Any]]:
    events = []
    for step in range(2):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "ts": step * 1e6,
                "dur": 1e6,
                "pid": 1,
                "tid": 1,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm",
                "ts": step * 1e6,
                "dur": 10.0,
                "pid": 0,
                "tid": 7,
            }
        )
        for k in range(syncs_per_step):
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaStreamSynchronize",
                    "ts": step * 1e6 + k,
                    "dur": 5.0,
                    "pid": 1,
                    "tid": 1,
                }
            )
    return events


def memory(
    peak: float,
    baseline: float = 10.0,
    trend: dict[str, Any] | None = None,
    leaks: list[Any] | None = None,
) -> dict[str, Any]:
    figures = {"allocated_gib": peak * 0.9, "reserved_gib": peak, "peak_gib": peak}
    return {
        "baseline": {
            "cuda:0": {"allocated_gib": baseline, "reserved_gib": baseline, "peak_gib": baseline}
        },
        "last": {"cuda:0": figures},
        "samples": 100,
        "peak": {"cuda:0": figures},
        "mean": {"cuda:0": figures},
        "trend": trend or {},
        "leaks": leaks or [],
    }


CASES = [
    # rule, summary that triggers it, summary that does not
    (
        "data_loading",
        stage_times(stages=stages(data_loading=0.3, update=0.6)),
        stage_times(stages=stages(data_loading=0.1, update=0.8)),
    ),
    (
        "rollout_generation",
        stage_times(stages=stages(rollout=0.6, update=0.35)),
        stage_times(stages=stages(rollout=0.4, update=0.55)),
    ),
    (
        "optimizer_step",
        stage_times(stages=stages(update=0.5, update__optimizer=0.25, rollout=0.45)),
        stage_times(stages=stages(update=0.5, update__optimizer=0.1, rollout=0.45)),
    ),
    (
        "memory_headroom",
        stage_times(device=CUDA, memory=memory(peak=30.0)),
        stage_times(device=CUDA, memory=memory(peak=60.0)),
    ),
    (
        "memory_leak",
        stage_times(
            memory=memory(
                peak=60.0,
                trend={
                    "cuda:0/allocated_gib": {
                        "slope_mib_per_step": 4.0,
                        "r_squared": 0.98,
                        "from_step": 10,
                        "to_step": 60,
                        "from_gib": 10.0,
                        "to_gib": 10.2,
                        "samples": 50,
                    }
                },
            )
        ),
        stage_times(
            memory=memory(
                peak=60.0,
                trend={
                    "cuda:0/allocated_gib": {
                        "slope_mib_per_step": 4.0,
                        "r_squared": 0.3,
                        "from_step": 10,
                        "to_step": 60,
                        "from_gib": 10.0,
                        "to_gib": 10.2,
                        "samples": 50,
                    }
                },
            )
        ),
    ),
    (
        "stragglers",
        stage_times(stages={"rollout": stats(0.4, p95=1.2), "update": stats(0.5)}),
        stage_times(stages={"rollout": stats(0.4, p95=0.6), "update": stats(0.5)}),
    ),
    (
        "unaccounted_time",
        stage_times(stages=stages(rollout=0.3, update=0.3)),
        stage_times(stages=stages(rollout=0.45, update=0.45)),
    ),
    (
        "trace_overhead",
        stage_times(
            overhead={
                "traced_steps": 3,
                "traced_step_mean": 2.0,
                "other_step_mean": 1.0,
                "trace_export_seconds": 0.1,
            }
        ),
        stage_times(
            overhead={
                "traced_steps": 3,
                "traced_step_mean": 1.1,
                "other_step_mean": 1.0,
                "trace_export_seconds": 0.1,
            }
        ),
    ),
    (
        "largest_stage",
        stage_times(stages=stages(reward=0.5, update=0.45)),
        stage_times(stages=stages(reward=0.25, update=0.25, rollout=0.25, ref=0.2)),
    ),
]


@pytest.mark.parametrize(("rule", "fires", "quiet"), CASES, ids=[case[0] for case in CASES])
def test_each_rule_fires_with_its_numbers_and_stays_quiet_otherwise(
    tmp_path: Path, rule: str, fires: dict[str, Any], quiet: dict[str, Any]
) -> None:
    found = rules_for(tmp_path / "fires", fires)
    assert rule in found
    assert found[rule]["evidence"] and found[rule]["title"] and found[rule]["detail"]
    assert rule not in rules_for(tmp_path / "quiet", quiet)


def test_the_rules_cover_every_rule_of_the_module() -> None:
    from training_platform.profile_report.rules import RULES

    tested = {case[0] for case in CASES} | {"host_device_sync"}
    assert {rule.__name__ for rule in RULES} == tested


def test_host_device_synchronisations_fire_on_a_gpu_trace_only_when_frequent(
    tmp_path: Path,
) -> None:
    summary = stage_times(device=CUDA)
    found = rules_for(tmp_path / "many", summary, gpu_trace(syncs_per_step=12))
    assert found["host_device_sync"]["evidence"]["per_step"] == 12
    assert "host_device_sync" not in rules_for(
        tmp_path / "few", summary, gpu_trace(syncs_per_step=1)
    )


def test_evidence_carries_the_triggering_numbers(tmp_path: Path) -> None:
    found = rules_for(tmp_path, stage_times(stages=stages(rollout=0.6, update=0.35)))
    evidence = found["rollout_generation"]["evidence"]
    assert evidence == {"stages": ["rollout"], "share": pytest.approx(0.6), "threshold": 0.5}
    headroom = rules_for(tmp_path / "h", stage_times(device=CUDA, memory=memory(peak=30.0)))
    assert headroom["memory_headroom"]["evidence"]["batch_factor"] == pytest.approx((72 - 10) / 20)
