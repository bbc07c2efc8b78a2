from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from tests.callbacks.helpers import read_records, read_status
from training_platform.demo import DemoConfig, run_demo
from training_platform.demo.cli import demo_train


def anomalies(records: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    return [(r["step"], a["type"], a["severity"]) for r in records for a in r.get("anomalies", ())]


def test_a_long_healthy_demo_run_learns_and_raises_no_false_alarm(tmp_path: Path) -> None:
    result = run_demo("healthy", tmp_path, DemoConfig(steps=2000, seed=1))
    records = read_records(result.metrics_path)
    assert result.status == "completed"
    assert [r["step"] for r in records] == list(range(2000))
    assert anomalies(records) == []
    assert read_status(result.status_path)["anomaly_detected"] is False

    def mean(group: str, field: str, part: list[dict[str, Any]]) -> float:
        return statistics.fmean(r[group][field] for r in part)

    early, late = records[:100], records[-100:]
    assert mean("reward", "mean", late) > mean("reward", "mean", early) + 0.15  # it learns
    assert records[0]["kl"]["mean"] < 1e-6  # starts at the reference ...
    assert 0.05 < mean("kl", "mean", late) < 1.0  # ... and drifts, within the threshold
    assert mean("extra", "actor/entropy", late) < mean("extra", "actor/entropy", early)
    last = records[-1]
    assert set(last["timing"]) == {"rollout", "reward", "ref", "advantage", "update_actor"}
    assert last["performance"]["tokens_per_second"] > 0
    assert last["performance"]["step_time"] >= sum(last["timing"].values()) * 0.99
    assert {"min", "max", "std"} <= last["reward"].keys()


def test_a_nan_loss_is_flagged_at_its_step_and_the_run_goes_on(tmp_path: Path) -> None:
    result = run_demo("nan", tmp_path, DemoConfig(steps=40, nan_at=25))
    records = read_records(result.metrics_path)
    assert anomalies(records) == [(25, "nan_inf", "critical")]
    assert result.status == "completed"
    assert records[26]["gradient"]["actor_norm"] < 10  # the update was skipped, not applied


def test_a_learning_rate_spike_blows_up_the_kl_within_a_few_steps(tmp_path: Path) -> None:
    result = run_demo("spike", tmp_path, DemoConfig(steps=50, lr_spike_at=40))
    found = anomalies(read_records(result.metrics_path))
    kl_alerts = [(step, severity) for step, kind, severity in found if kind == "kl_explosion"]
    assert kl_alerts and 40 <= kl_alerts[0][0] <= 43
    assert kl_alerts[0][1] == "critical"
    assert all(step >= 40 for step, _, _ in found)  # nothing before the fault


def test_stop_on_anomaly_stops_the_demo_at_the_faulty_step(tmp_path: Path) -> None:
    result = run_demo("stop", tmp_path, DemoConfig(steps=300, nan_at=12), stop_on_anomaly=True)
    assert (result.status, result.steps_run) == ("stopped", 13)
    assert result.stop_reason is not None and result.stop_reason.startswith("nan_inf")
    assert read_status(result.status_path)["status"] == "stopped"


def test_a_stalled_writer_leaves_the_file_unchanged_while_the_run_is_still_running(
    tmp_path: Path,
) -> None:
    stop = threading.Event()
    config = DemoConfig(steps=20, stall_at=8, stall_seconds=30.0)
    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append(run_demo("stall", tmp_path, config, stop_event=stop))
    )
    worker.start()
    metrics = tmp_path / "stall_metrics.jsonl"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _lines(metrics) < 8:
            time.sleep(0.02)
        assert _lines(metrics) == 8  # steps 0..7 written, step 8 stuck in the writer
        size = metrics.stat().st_size
        time.sleep(0.3)
        assert metrics.stat().st_size == size
        assert read_status(tmp_path / "stall_status.json")["status"] == "running"
    finally:
        stop.set()  # cancels the stall and then the run
        worker.join(timeout=60)
    (result,) = outcome
    assert result.status == "stopped"
    assert _lines(metrics) == 9  # the stalled step was written once released


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_the_demo_train_command_runs_and_reports(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("demo-train")(demo_train)
    app.command("other")(lambda: None)  # two commands: typer keeps the sub-command name
    result = CliRunner().invoke(
        app,
        ["demo-train", "--job-id", "cli", "--output-dir", str(tmp_path), "--steps", "15"],
    )
    assert result.exit_code == 0, result.output
    assert "completed after 15 steps" in result.output
    assert len(read_records(tmp_path / "cli_metrics.jsonl")) == 15


def test_demo_train_runs_epochs_and_times_its_stages_through_the_profiler(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("demo-train")(demo_train)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(
        app,
        ["demo-train", "--job-id", "ep", "--output-dir", str(tmp_path), "--epochs", "2",
         "--steps-per-epoch", "4", "--profile", "--trace-wait", "1", "--trace-active", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "completed after 8 steps" in result.output and "profile-report" in result.output
    records = read_records(tmp_path / "ep_metrics.jsonl")
    assert [r["extra"]["epoch"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1]
    # The kit's stages, nested ones included, not the demo's own timing.
    assert set(records[-1]["timing"]) == {
        "rollout", "reward", "ref", "advantage", "update_actor",
        "update_actor/backward", "update_actor/optimizer",
    }  # fmt: skip
    profiles = tmp_path / "ep_profiles"
    assert sorted(p.name for p in profiles.iterdir()) == ["stage_times.json", "step_2"]
    summary = json.loads((profiles / "stage_times.json").read_text())
    assert summary["stages"]["rollout"]["count"] == 8 and summary["memory"]["baseline"]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of each child process of `pid` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except FileNotFoundError:  # ended between the two reads
                continue
            found.append((int(child), stat.rsplit(")", 1)[1].split()[0]))
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demo_command(
    tmp_path: Path, port: int, *, steps: int, step_delay: float, more: tuple[str, ...] = ()
) -> list[str]:
    """`training-platform demo` on `port`, its files and database under `tmp_path`."""
    return [
        sys.executable, "-m", "training_platform", "demo", "--host", "127.0.0.1",
        "--port", str(port), "--metrics-dir", str(tmp_path / "metrics"),
        "--database-url", f"sqlite:///{tmp_path / 'platform.db'}",
        "--steps", str(steps), "--step-delay", str(step_delay), "--lr-spike-at", "0", *more,
    ]  # fmt: skip


def test_the_demo_command_runs_runs_to_compare_keeps_its_log_quiet_and_reaps_them(
    tmp_path: Path,
) -> None:
    port = _free_port()
    metrics_dir = tmp_path / "metrics"
    rates = ("--lr", "0.002", "--lr", "0.0005")  # two runs, to compare
    command = _demo_command(tmp_path, port, steps=15, step_delay=0, more=rates)
    demo = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(demo.stdout or ()))
    reader.start()
    try:
        deadline = time.monotonic() + 120
        finished = False
        while time.monotonic() < deadline and not finished:
            statuses = [read_status(p)["status"] for p in metrics_dir.glob("*_status.json")]
            finished = statuses == ["completed", "completed"]
            time.sleep(0.2)
        assert finished, "".join(output)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for _ in range(5):
                assert client.get("/api/jobs").status_code == 200
            jobs = client.get("/api/jobs?project=demo").json()["jobs"]
            ids = sorted(job["job_id"] for job in jobs)
            assert [job_id.rsplit("-", 1)[1] for job_id in ids] == ["lr0.0005", "lr0.002"]
            assert {job["name"] for job in jobs} == {"GRPO lr 0.002", "GRPO lr 0.0005"}
            diff = client.get(f"/api/compare/config?jobs={','.join(ids)}").json()
            assert diff["differences"] == {"grpo.lr": dict(zip(ids, [0.0005, 0.002], strict=True))}
            (compared, other) = client.get(f"/api/compare?jobs={','.join(ids)}").json()["jobs"]
            assert compared["count"] == other["count"] == 15
        # The finished trainer is reaped while the server keeps serving: no zombie.
        while time.monotonic() < deadline and _children(demo.pid):
            time.sleep(0.2)
        assert _children(demo.pid) == []
        assert demo.poll() is None  # the server is still up
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            demo.kill()
        reader.join(timeout=30)
    log = "".join(output)
    assert "training_platform demo:" in log and "/#/compare?jobs=" in log
    assert "GET /api/jobs" not in log  # no access log line per request
    for noise in ("USDT", "profiler_start", "profiler_stop", "CPUAllocator"):
        assert noise not in log, log


def _ignore_sigint() -> None:
    """In the child before exec: SIGINT ignored, as a script's background job
    (`training-platform demo &`) starts; an ignored signal stays ignored
    across exec, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_status(metrics_dir: Path, wanted: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        statuses = [read_status(p)["status"] for p in metrics_dir.glob("*_status.json")]
        if statuses == [wanted]:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_to_the_demo_stops_its_trainer_too(tmp_path: Path, sigint: str) -> None:
    """uvicorn re-raises a captured SIGTERM once it has shut down: with the
    default disposition that killed the demo before it could stop its trainer,
    which then ran on, orphaned, with nobody serving its run. With SIGINT
    ignored (a background job of a script, or this suite run from one), the
    trainer inherited that and the demo's SIGINT to it did nothing: it trained
    10 s longer, was killed and its status file said "running" for good."""
    port = _free_port()
    metrics_dir = tmp_path / "metrics"
    command = _demo_command(tmp_path, port, steps=100000, step_delay=0.05)
    demo = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        preexec_fn=_ignore_sigint if sigint == "ignored" else None,
    )
    trainers: list[tuple[int, str]] = []
    try:
        deadline = time.monotonic() + 120
        assert _wait_for_status(metrics_dir, "running", deadline)
        trainers = _children(demo.pid)
        assert len(trainers) == 1
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=30)
        (trainer_pid, _state), *_ = trainers
        while time.monotonic() < deadline and Path(f"/proc/{trainer_pid}").exists():
            time.sleep(0.2)
        assert not Path(f"/proc/{trainer_pid}").exists(), "the trainer outlived the demo"
        # Only the trainer writes "stopped", on its way out: a trainer the demo had to
        # SIGKILL (10 s after SIGTERM) leaves "running". Not timed: a loaded machine
        # may take most of those 10 s to stop a trainer that did hear the signal.
        (status_path,) = metrics_dir.glob("*_status.json")
        assert read_status(status_path)["status"] == "stopped", "the trainer was killed"
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid, _state in trainers:
            if Path(f"/proc/{pid}").exists():
                subprocess.run(["kill", "-9", str(pid)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_demo_train_stops_on_sigint_and_sigterm_alike_even_with_sigint_ignored(
    tmp_path: Path, stop: signal.Signals
) -> None:
    command = [
        sys.executable, "-m", "training_platform", "demo-train", "--job-id", "sig",
        "--output-dir", str(tmp_path), "--steps", "100000", "--step-delay", "0.05",
    ]  # fmt: skip
    trainer = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_ignore_sigint
    )
    try:
        assert _wait_for_status(tmp_path, "running", time.monotonic() + 120)
        trainer.send_signal(stop)
        trainer.wait(timeout=30)
        assert read_status(tmp_path / "sig_status.json")["status"] == "stopped"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
