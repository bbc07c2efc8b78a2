"""`training-platform sysmon` end to end, as a process on the trainer-side install (no typer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from training_platform.callbacks.system.sysmon import main

REPO = Path(__file__).resolve().parents[3]
# What the trainer-side install lacks: the command must run without any of it.
NOT_INSTALLED = ("typer", "fastapi", "sqlalchemy", "pydantic", "uvicorn", "click", "rich")


def start_sysmon(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`training-platform sysmon ARGS` through the console script's entry, the server's
    and the CLI's packages blocked as if not installed."""
    script = textwrap.dedent(
        f"""
        import sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {NOT_INSTALLED!r}:
                    raise ImportError(f"{{name}} is not installed here")
                return None

        sys.meta_path.insert(0, Blocker())
        sys.argv = ["training-platform", "sysmon", *{list(args)!r}]
        from training_platform.entry import main
        main()
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def wait_for_lines(path: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_bytes().count(b"\n") >= count):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no lines"
        time.sleep(0.01)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sysmon_samples_until_a_stop_signal_and_ends_on_a_complete_line(
    tmp_path: Path, stop: signal.Signals
) -> None:
    hostile = "../../evil host\n"
    process = start_sysmon(
        "run7", "--output-dir", str(tmp_path), "--interval", "0.02", "--host", hostile
    )
    path = tmp_path / "run7_system._.._evil_host_.jsonl"
    try:
        wait_for_lines(path, 3, process)
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing outside, one file
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = [json.loads(line) for line in data.splitlines()]
    assert len(lines) >= 3 and all(line["host"] == hostile for line in lines)
    assert all(line["step"] is None and "memory" in line for line in lines)
    assert f"stopped after {len(lines)} samples" in stderr


def test_sysmon_writes_into_the_default_metrics_directory(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    process = start_sysmon(
        "run8", "--interval", "0.02", "--host", "node-2", env={"PLATFORM_METRICS_DIR": str(metrics)}
    )
    try:
        wait_for_lines(metrics / "run8_system.node-2.jsonl", 1, process)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["bad/id", "--interval", "1"], "invalid job_id"),
        (["run9", "--interval", "0"], "--interval must be a positive number"),
        (["run9", "--interval", "nan"], "--interval must be a positive number"),
    ],
)
def test_sysmon_refuses_bad_arguments_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main([*args, "--output-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and said in line
    assert list(tmp_path.iterdir()) == []
