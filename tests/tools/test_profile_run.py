"""`training-platform profile-run -- CMD`: the user's own script profiled by the kit inside it;
any command measured from outside, its exit status passed on."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_platform.cli import app

runner = CliRunner()

# A user's training script: torch on the CPU, our callback, stages named through the
# profiler the switch asks for (`env_profiler` is None when profiling is off).
TRAIN = textwrap.dedent(
    """
    import sys
    import torch
    from training_platform.callbacks import PlatformCallback
    from training_platform.callbacks.profiling.env_switch import env_profiler

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = env_profiler("tiny")
    callback = PlatformCallback(
        "tiny", contributors=[profiler] if profiler else [], system_metrics_interval=0
    )
    callback.on_train_begin(total_steps=6)
    for step in range(6):
        callback.on_step_begin(step)
        with profiler.stage("forward"):
            loss = model(torch.randn(16, 8)).pow(2).mean()
        with profiler.stage("update"):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        profiler.add_batch(samples=16)
        callback.on_step_end(step, {"loss": {"actor_loss": loss.item()}})
    callback.on_train_end()
    """
)
# The same loop with the callback alone: no stage named.
BARE = textwrap.dedent(
    """
    import torch
    from training_platform.callbacks import PlatformCallback

    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    callback = PlatformCallback("tiny", system_metrics_interval=0)
    callback.on_train_begin(total_steps=6)
    for step in range(6):
        callback.on_step_begin(step)
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        callback.on_step_end(step, {"loss": {"actor_loss": loss.item()}})
    callback.on_train_end()
    """
)
# A script without our callback: it allocates ~40 MiB and fails with status 3.
PLAIN = "import sys\nheld = [bytearray(1 << 20) for _ in range(40)]\nsys.exit(3)\n"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def script(directory: Path, text: str) -> str:
    path = directory / "train.py"
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_a_script_with_the_callback_is_profiled_and_passes_the_check(tmp_path: Path) -> None:
    out = tmp_path / "out"
    train = script(tmp_path, TRAIN)
    code, stdout, stderr = run(
        "profile-run", "-o", str(out), "--trace", "1,1,2", "--check", "--", sys.executable, train
    )
    assert code == 0, stdout + stderr
    assert f"profile: {out / 'tiny_profiles'} (6 steps, stages: " in stdout
    assert "traces: step_2)\n  check: OK\n" in stdout
    for name in ("stage_times.json", "step_2/trace.json", "step_2/op_stats.csv"):
        assert (out / "tiny_profiles" / name).is_file()
    assert (out / "tiny_metrics.jsonl").is_file()  # $PLATFORM_METRICS_DIR was the output dir
    code, stdout, _ = run("profile-report", str(out / "tiny_profiles"), "--check")
    assert code == 0, stdout
    stages = json.loads((out / "tiny_profiles/stage_times.json").read_text())["stages"]
    assert set(stages) == {"forward", "update"}
    figures = json.loads((out / "profile_run.json").read_text())
    assert figures["process"]["exit_code"] == 0
    assert figures["process"]["peak_rss_gib"] > 0.05  # torch alone is more than 50 MiB
    assert figures["profiles"] == [str(out / "tiny_profiles")]


def test_a_script_without_the_callback_gets_the_process_figures_and_its_status(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run(
        "profile-run", "-o", str(out), "--", sys.executable, script(tmp_path, PLAIN)
    )
    assert code == 3  # the command's own status
    assert stdout.startswith("command exited 3 after ")
    assert f"no profile written in {out}: the command runs no PlatformCallback" in stderr
    figures = json.loads((out / "profile_run.json").read_text())
    assert figures["profiles"] == []
    assert figures["process"]["exit_code"] == 3
    assert figures["process"]["rss_samples"] >= 1
    assert figures["process"]["cpu_seconds"] > 0


def test_require_profile_fails_a_command_that_wrote_none(tmp_path: Path) -> None:
    ok = script(tmp_path, "print('trained')\n")
    code, _, _ = run("profile-run", "-o", str(tmp_path / "a"), "--", sys.executable, ok)
    assert code == 0
    code, _, stderr = run(
        "profile-run", "-o", str(tmp_path / "b"), "--require-profile", "--", sys.executable, ok
    )
    assert code == 1 and "no profile written" in stderr


def test_a_command_that_does_not_exist_is_127_and_one_line(tmp_path: Path) -> None:
    code, _, stderr = run("profile-run", "-o", str(tmp_path), "--", "no-such-trainer-xyz")
    assert code == 127
    assert stderr.strip() == "FAILED: cannot run 'no-such-trainer-xyz': No such file or directory"


def test_a_malformed_trace_window_is_refused_before_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    command = script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    code, _, stderr = run("profile-run", "--trace", "5,1", "--", sys.executable, command)
    assert code == 2 and "--trace" in stderr
    assert not marker.exists()


@pytest.mark.slow
def test_a_script_that_names_no_stage_gets_steps_memory_and_a_trace_and_is_told(
    tmp_path: Path,
) -> None:
    """Only PlatformCallback in the script: the switch adds the profiler, and the check
    says what is missing (with --check, that fails the command)."""
    out = tmp_path / "out"
    code, stdout, _ = run(
        "profile-run", "-o", str(out), "--trace", "1,1,2", "--check", "--", sys.executable,
        script(tmp_path, BARE),
    )  # fmt: skip
    assert code == 1
    assert "(6 steps, stages: none named; traces: step_2)" in stdout
    assert "stage_times.json: stages is empty: no stage was timed through the kit" in stdout
    summary = json.loads((out / "tiny_profiles/stage_times.json").read_text())
    assert summary["step_time"]["count"] == 6 and summary["memory"]["samples"] >= 1
