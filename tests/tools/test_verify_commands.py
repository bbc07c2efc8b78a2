"""`profile`, `verify-profile`, `verify-determinism`, `verify-dashboard`: a verdict, and a
non-zero exit naming what is wrong (the profiling documents' make targets)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_platform.cli import app
from training_platform.tools import dashboard_check
from training_platform.tools.dashboard_check import NEEDED_CHARTS, OPTIONAL_CHARTS

runner = CliRunner()
CHART_SPECS = Path(dashboard_check.__file__).parents[1] / "web/static/js/chart_specs.js"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of one `training-platform profile` run (8 CPU steps)."""
    out = tmp_path_factory.mktemp("profile") / "out"
    code, stdout, stderr = run("profile", "--output-dir", str(out), "--steps", "8")
    assert code == 0, stdout + stderr
    assert "profiled 8 steps" in stdout
    return out


@pytest.fixture
def copy(profiled: Path, tmp_path: Path) -> Path:
    target = tmp_path / "out"
    shutil.copytree(profiled, target)
    return target


# --- profile and verify-profile ------------------------------------------------------------


def test_profile_writes_a_profile_that_verify_profile_passes(profiled: Path) -> None:
    traces = sorted(p.name for p in (profiled / "demo_profiles").glob("step_*"))
    assert traces == ["step_4"]  # wait 3, warm-up 1: the window ends before the run does
    code, stdout, _ = run("verify-profile", str(profiled))
    assert code == 0
    assert stdout.startswith("profile OK: ")
    assert "8 steps, stages: " in stdout and stdout.endswith("; traces: step_4\n")
    stages = stdout.split("stages: ")[1].split(";")[0].split(", ")
    assert sorted(stages) == ["advantage", "ref", "reward", "rollout", "update_actor"]


def test_a_profile_missing_its_trace_fails_naming_the_file(copy: Path) -> None:
    (copy / "demo_profiles/step_4/trace.json").unlink()
    code, _, stderr = run("verify-profile", str(copy / "demo_profiles"))
    assert code == 1
    assert stderr.strip().splitlines()[-1] == "FAILED: step_4: no trace.json in this profile"


def test_a_profile_without_its_summary_fails(copy: Path) -> None:
    (copy / "demo_profiles/stage_times.json").unlink()
    code, _, stderr = run("verify-profile", str(copy), "--job-id", "demo")
    assert code == 1
    assert "FAILED: stage_times.json: missing" in stderr


def test_a_profile_whose_trace_window_never_ran_is_incomplete(copy: Path) -> None:
    profile = copy / "demo_profiles"
    shutil.rmtree(profile / "step_4")
    summary = json.loads((profile / "stage_times.json").read_text())
    (profile / "stage_times.json").write_text(json.dumps({**summary, "traces": []}))
    code, _, stderr = run("verify-profile", str(profile))
    assert code == 1
    assert "no torch.profiler trace (no step_N/ folder)" in stderr
    code, stdout, _ = run("verify-profile", str(profile), "--allow-no-trace")
    assert code == 0 and "traces: none" in stdout


# --- verify-determinism ----------------------------------------------------------------------


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_two_logs_differing_only_in_wall_clock_fields_are_identical(
    profiled: Path, tmp_path: Path
) -> None:
    log = profiled / "demo_metrics.jsonl"
    records = lines(log)
    for record in records:  # what a second run measures differently
        record["timestamp"] = 1.0
        record["timing"] = {"rollout": 9.0}
        record["performance"] = {"step_time": 9.0}
        record["extra"]["profiling/rss_gib"] = 9.0  # type: ignore[index]
    code, stdout, _ = run("verify-determinism", str(log), str(write(tmp_path / "b.jsonl", records)))
    assert code == 0
    assert re.match(r"deterministic: identical: \d+ values over 8 steps", stdout)


def test_a_changed_metric_is_named_with_its_step(profiled: Path, tmp_path: Path) -> None:
    log = profiled / "demo_metrics.jsonl"
    records = lines(log)
    records[3]["loss"] = {"actor_loss": 0.5}
    code, _, stderr = run("verify-determinism", str(log), str(write(tmp_path / "b.jsonl", records)))
    assert code == 1
    actual = lines(log)[3]["loss"]["actor_loss"]  # type: ignore[index]
    assert f"step 3: loss.actor_loss is {actual!r} in one run, 0.5 in the other" in stderr


def test_a_missing_step_or_field_fails(profiled: Path, tmp_path: Path) -> None:
    log = profiled / "demo_metrics.jsonl"
    code, _, stderr = run(
        "verify-determinism", str(log), str(write(tmp_path / "b.jsonl", lines(log)[:-1]))
    )
    assert code == 1 and "1 step(s) only in the first run: 7" in stderr
    records = lines(log)
    del records[0]["kl"]
    code, _, stderr = run("verify-determinism", str(log), str(write(tmp_path / "c.jsonl", records)))
    assert code == 1 and "step 0: kl.max is" in stderr and "absent in the other" in stderr


def test_logs_with_nothing_but_wall_clock_fields_prove_nothing(tmp_path: Path) -> None:
    records: list[dict[str, object]] = [{"step": 0, "timestamp": 1.0, "timing": {"a": 1.0}}]
    a, b = write(tmp_path / "a.jsonl", records), write(tmp_path / "b.jsonl", records)
    code, _, stderr = run("verify-determinism", str(a), str(b))
    assert code == 1 and "nothing to compare" in stderr


def test_a_log_that_is_not_json_lines_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0}\nnot json\n')
    code, _, stderr = run("verify-determinism", str(bad), str(bad))
    assert code == 1 and stderr.strip() == f"FAILED: {bad}:2: not a JSON record"
    code, _, stderr = run("verify-determinism", str(bad))
    assert code == 2 and "give two metrics files, not 1" in stderr


@pytest.mark.slow
def test_two_seeded_demo_runs_are_identical() -> None:
    code, stdout, stderr = run("verify-determinism", "--steps", "4", "--seed", "3")
    assert code == 0, stderr
    assert re.match(r"deterministic: identical: \d+ values over 4 steps", stdout)


# --- verify-dashboard ------------------------------------------------------------------------


def test_the_needed_series_are_those_of_the_dashboards_charts() -> None:
    """The Python list follows chart_specs.js: every key of a default chart is in it."""
    source = CHART_SPECS.read_text()
    charts = source[source.index("export const CHARTS") : source.index("export function")]
    keys = set(re.findall(r'key: "([^"]+)"', charts))
    keys |= set(re.findall(r'(?:lower|upper): "([^"]+)"', charts))
    keys |= set(re.findall(r'stackPrefix: "([^"]+)"', charts))
    entropy = re.search(r"const ENTROPY = \[([^\]]+)\]", source)
    assert entropy is not None
    keys |= {f"extra.{key}" for key in re.findall(r'"([^"]+)"', entropy.group(1))}
    ours = {
        key for wanted in (*NEEDED_CHARTS.values(), *OPTIONAL_CHARTS.values()) for key in wanted
    }
    assert ours == keys


@pytest.mark.slow
def test_the_demo_log_feeds_every_chart_and_is_served(profiled: Path) -> None:
    code, stdout, stderr = run("verify-dashboard", str(profiled / "demo_metrics.jsonl"))
    assert code == 0, stderr
    assert "  KL divergence: kl.max, kl.mean" in stdout
    assert "  Per-stage time: timing.advantage" in stdout
    assert "not in this log (drawn when present): GPU memory allocated" in stdout
    assert stdout.strip().splitlines()[-1] == (
        "dashboard OK: 8 dashboard charts fed by the log and served (8 steps)"
    )


def test_a_log_without_the_kl_fails_naming_its_chart(profiled: Path, tmp_path: Path) -> None:
    records = lines(profiled / "demo_metrics.jsonl")
    for record in records:
        del record["kl"]
    log = write(tmp_path / "run7_metrics.jsonl", records)
    code, _, stderr = run("verify-dashboard", str(log))
    assert code == 1
    assert stderr.strip() == "FAILED: the log lacks the series of: KL divergence (kl.mean, kl.max)"


def test_a_series_the_server_does_not_serve_is_named(
    profiled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def served(log: Path, job_id: str) -> set[str]:
        assert job_id == "demo"  # from the file's name
        return {"loss.actor_loss", "reward.mean", "kl.mean", "gradient.actor_norm"}

    monkeypatch.setattr(dashboard_check, "served_series", served)
    code, _, stderr = run("verify-dashboard", str(profiled / "demo_metrics.jsonl"))
    assert code == 1
    assert "FAILED: the server does not serve: KL divergence (kl.max); Entropy" in stderr
