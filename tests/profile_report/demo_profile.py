"""One real profiled demo run (`demo-train --profile`) per test session, shared by copies.

The run takes a few seconds; the report, API and browser tests each copy its
files rather than run it again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from training_platform.cli import app

JOB = "prof"
STEPS = 24
# The stages the demo times through the kit (update_actor's two are nested in it).
DEMO_STAGES = frozenset(
    {"rollout", "reward", "ref", "advantage", "update_actor", "update_actor/backward",
     "update_actor/optimizer"}
)  # fmt: skip
_RUN: dict[str, Path] = {}


def demo_run(factory: pytest.TempPathFactory) -> Path:
    """The metrics folder of the session's profiled demo run (job `prof`)."""
    if "dir" not in _RUN:
        root = factory.mktemp("demo-profile")
        result = CliRunner().invoke(
            app,
            [
                "demo-train",
                "--job-id",
                JOB,
                "--output-dir",
                str(root),
                "--steps",
                str(STEPS),
                "--profile",
                "--trace-wait",
                "3",
                "--trace-active",
                "2",
            ],
        )
        assert result.exit_code == 0, result.output
        _RUN["dir"] = root
    return _RUN["dir"]


def copy_demo_run(factory: pytest.TempPathFactory, target: Path) -> Path:
    """The run's files copied into `target` (a metrics folder); returns its profiles folder."""
    source = demo_run(factory)
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_dir():
            shutil.copytree(path, target / path.name)
        else:
            shutil.copy2(path, target / path.name)
    return target / f"{JOB}_profiles"


def stage_times(**overrides: Any) -> dict[str, Any]:
    """A version-2 `stage_times.json` of a 100-step run; `overrides` replace top-level keys."""
    data: dict[str, Any] = {
        "version": 2,
        "job_id": "synthetic",
        "updated_at": 1.0,
        "steps": 100,
        "percentile_window": 10000,
        "cuda_sync": False,
        "device": {"type": "cpu", "name": "x86_64", "cpus": 2, "torch": "2.13"},
        "step_time": stats(1.0),
        "stages": {"rollout": stats(0.3), "update": stats(0.3), "reward": stats(0.2)},
        "throughput": {
            "seconds": 100.0,
            "samples": 6400,
            "tokens": 64000,
            "samples_per_second": 64.0,
            "tokens_per_second": 640.0,
        },
        "memory": {
            "baseline": {"rss_gib": 1.0},
            "last": {"rss_gib": 1.1},
            "samples": 100,
            "peak": {"rss_gib": 1.2},
            "mean": {"rss_gib": 1.1},
            "trend": {},
            "leaks": [],
        },
        "traces": [],
        "overhead": {
            "traced_steps": 3,
            "traced_step_mean": 1.1,
            "other_step_mean": 1.0,
            "trace_export_seconds": 0.2,
        },
    }
    data.update(overrides)
    return data


def stats(mean: float, p95: float | None = None, count: int = 100) -> dict[str, float]:
    return {
        "count": count,
        "mean": mean,
        "p50": mean,
        "p95": p95 if p95 is not None else mean,
        "total": mean * count,
    }
