"""A profile recorded on a real NVIDIA H200 (scripts/record_gpu_fixtures.py): the
report reads torch's CUDA trace and op table as they really are, and the
platform stores the run's per-device memory series.

The fixture is `tests/fixtures/gpu_h200/cuda_run/`: a tiny model trained 12
steps on `cuda:0` through `PlatformCallback` + `StepProfiler` (torch
2.11.0+cu130, driver 580.159.04), traced at steps 3-4 with CUDA activities.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from training_platform.cli import app

RECORDED = Path(__file__).parents[1] / "fixtures" / "gpu_h200" / "cuda_run"
runner = CliRunner()


def test_the_report_of_a_real_cuda_profile_counts_its_steps_and_syncs_right() -> None:
    result = runner.invoke(
        app, ["profile-report", str(RECORDED / "gpu1_profiles"), "--json", "--no-write"]
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"], report["problems"]
    assert report["device"]["type"] == "cuda" and report["device"]["name"] == "NVIDIA H200"
    (trace,) = report["traces"]
    # torch copies each ProfilerStep span onto the GPU's timeline: counted, the
    # two traced steps read as [3, 4, 4, 3].
    assert trace["scan"]["steps"] == [3, 4]
    assert trace["scan"]["kernels"] > 0 and trace["scan"]["runtime_calls"] > 0
    # The loop syncs once per step (float(loss)); AdamW's 16 .item() calls on its
    # CPU step counters wait for nothing. Counted as syncs they raised a false
    # "10 host-device synchronisations per step" warning.
    assert trace["scan"]["sync_calls"] == 3  # 2 x float(loss), 1 profiler flush
    assert "host_device_sync" not in {rec["rule"] for rec in report["recommendations"]}
    assert "self_cuda_time_ms" in trace["op_table"]["columns"]
    assert report["operators"]["top"][0]["self_time_ms"] > 0
    assert "cuda:0" in json.dumps(report["memory"])


def test_the_platform_stores_the_real_runs_cuda_memory_series(
    client: TestClient, metrics_dir: Path
) -> None:
    for path in RECORDED.glob("gpu1_*"):
        if path.is_file():
            shutil.copy(path, metrics_dir / path.name)

    assert client.post("/api/monitoring/gpu1/metrics/sync").json()["new_metrics"] == 12
    series = client.get(
        "/api/monitoring/gpu1/metrics?max_points=100&fields=extra,performance"
    ).json()["series"]

    allocated = [
        v for v in series["extra.profiling/cuda0/allocated_gib"]["values"] if v is not None
    ]
    assert allocated and all(0 < value < 140 for value in allocated)  # GiB on a 141 GB card
    assert max(series["performance.tokens_per_second"]["values"]) > 0
    job = client.get("/api/jobs/gpu1").json()
    assert job["status"] == "completed"
