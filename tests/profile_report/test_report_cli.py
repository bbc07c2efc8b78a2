"""`demo-train --profile` then `training-platform profile-report`: a full report, files, --check."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.profile_report.demo_profile import (
    DEMO_STAGES,
    JOB,
    STEPS,
    copy_demo_run,
    stage_times,
)
from training_platform.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_run(tmp_path_factory, tmp_path_factory.mktemp("cli") / "metrics")


def test_the_demo_writes_a_full_stage_times_json(profiled: Path) -> None:
    data = json.loads((profiled / "stage_times.json").read_text())
    assert data["version"] == 2 and data["steps"] == STEPS
    assert set(data["stages"]) == DEMO_STAGES
    assert (
        data["throughput"]["samples"] == STEPS * 64 and data["throughput"]["tokens_per_second"] > 0
    )
    assert data["device"]["type"] == "cpu"
    assert data["memory"]["baseline"]["rss_gib"] > 0
    assert data["memory"]["peak"]["rss_gib"] >= data["memory"]["mean"]["rss_gib"] > 0
    assert data["traces"] == ["step_4"]  # wait 3, warm-up 1: steps 4 and 5 recorded
    assert data["overhead"]["traced_steps"] == 3  # warm-up + 2 recorded


def test_profile_report_prints_writes_and_recommends(profiled: Path) -> None:
    result = runner.invoke(app, ["profile-report", str(profiled)])
    assert result.exit_code == 0, result.output
    for heading in (
        "Checks: OK",
        "Stage breakdown",
        "Throughput:",
        "Memory (",
        "Top operators by self time",
        "Profiler overhead",
        "Recommendations: ",
    ):
        assert heading in result.output
    # Which rules fire depends on the machine's timings; the largest stage (rollout or
    # the update, together ~75 % of the demo's step) is always at least 30 % of it.
    assert "Recommendations: none" not in result.output
    report = json.loads((profiled / "report.json").read_text())
    assert report["ok"] and report["recommendations"]
    assert "largest_stage" in {rec["rule"] for rec in report["recommendations"]} or any(
        rec["rule"] in ("rollout_generation", "optimizer_step") for rec in report["recommendations"]
    )
    assert all(rec["evidence"] for rec in report["recommendations"])
    assert report["operators"]["top"][0]["self_time_ms"] > 0
    rows = list(csv.DictReader((profiled / "summary.csv").open()))
    top = [row for row in rows if row["depth"] == "0" and row["stage"] != "(step)"]
    # The demo's two big stages lead (their order depends on the machine's timings),
    # and the table is sorted by total time.
    assert {row["stage"] for row in top[:2]} == {"rollout", "update_actor"}
    assert [float(row["total_s"]) for row in top] == sorted(
        (float(row["total_s"]) for row in top), reverse=True
    )
    assert rows[-1]["stage"] == "(step)"
    top_shares = sum(
        float(row["share"]) for row in rows if row["depth"] == "0" and row["stage"] != "(step)"
    )
    assert 0.5 < top_shares <= 1.0
    png = (profiled / "stage_breakdown.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_profile_report_json_and_a_metrics_folder_with_job_id(profiled: Path) -> None:
    result = runner.invoke(
        app, ["profile-report", str(profiled.parent), "--job-id", JOB, "--json", "--no-write"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["job_id"] == JOB
    assert report["traces"][0]["scan"]["steps"] == [4, 5]


def test_check_passes_on_a_good_profile_and_fails_on_a_broken_one(
    profiled: Path, tmp_path: Path
) -> None:
    assert runner.invoke(app, ["profile-report", str(profiled), "--check"]).exit_code == 0
    broken = tmp_path / "x_profiles"
    (broken / "step_5").mkdir(parents=True)
    (broken / "stage_times.json").write_text(json.dumps(stage_times(steps="many")))
    (broken / "step_5" / "trace.json").write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    result = runner.invoke(app, ["profile-report", str(broken), "--check"])
    assert result.exit_code == 1
    assert "steps is 'many', not a count" in result.output
    assert "step_5/trace.json: the trace is truncated or malformed after 0 events" in result.output
    assert "step_5: no op_stats.csv in this profile" in result.output
    assert not (broken / "report.json").exists()  # --check writes nothing


def test_a_job_id_that_would_leave_the_folder_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["profile-report", str(tmp_path), "--job-id", "../etc"])
    assert result.exit_code == 2 and "invalid job_id" in result.output


def test_symlinks_inside_a_profile_are_not_followed(profiled: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.csv"
    outside.write_text("op_name,self_time_ms,total_time_ms,calls\nsecret,1,1,1\n")
    linked = tmp_path / "linked_profiles"
    (linked / "step_1").mkdir(parents=True)
    (linked / "stage_times.json").write_text(json.dumps(stage_times()))
    os.symlink(outside, linked / "step_1" / "op_stats.csv")
    result = runner.invoke(app, ["profile-report", str(linked), "--json", "--no-write"])
    report = json.loads(result.output)
    assert {
        "path": "step_1/op_stats.csv",
        "problem": "a symbolic link: not read (it could lead outside the profile)",
    } in report["problems"]
    assert "secret" not in result.output
