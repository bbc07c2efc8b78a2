"""The status file tells the truth the moment a hook returns (issue 11 §2).

A real training process is killed (SIGKILL: no atexit, no flush) right after a
hook returns; the status file it leaves must already show what the hook did.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.writer.record_writer import RecordWriter

HEALTHY = '{"actor/pg_loss": 0.1, "critic/score/mean": 0.5, "actor/kl_loss": 0.01}'


def killed_after(tmp_path: Path, options: str, body: str) -> dict[str, Any]:
    """Run `body` in a fresh process, SIGKILL it right after, return its status file."""
    script = (
        textwrap.dedent(
            f"""
        import os, signal
        from training_platform.callbacks import PlatformCallback
        callback = PlatformCallback("job", {str(tmp_path)!r}, {options})
        """
        )
        + textwrap.dedent(body)
        + "\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == -9, result.stderr  # killed, not exited: no atexit ran
    return read_status(tmp_path / "job_status.json")


@pytest.mark.parametrize("options", ["background=True", "background=False"])
def test_running_and_total_steps_are_on_disk_when_on_train_begin_returns(
    tmp_path: Path, options: str
) -> None:
    status = killed_after(tmp_path, options, "callback.on_train_begin(total_steps=700)")
    assert (status["status"], status["total_steps"]) == ("running", 700)
    assert status["started_at"] is not None


@pytest.mark.parametrize("options", ["background=True", "background=False"])
def test_a_nan_step_is_flagged_on_disk_when_its_hook_returns(tmp_path: Path, options: str) -> None:
    body = f"""
    callback.on_train_begin(total_steps=100)
    for step in range(30):
        callback.on_step_end(step, {HEALTHY})
    callback.on_step_end(30, {{**{HEALTHY}, "actor/pg_loss": float("nan")}})
    """
    status = killed_after(tmp_path, options, body)
    assert status["anomaly_detected"] is True
    assert status["anomaly_reason"].startswith("nan_inf: ")
    assert status["current_step"] == 30
    records = read_records(tmp_path / "job_metrics.jsonl")
    assert [r["step"] for r in records] == list(range(31))  # the line is there too
    assert records[-1]["anomalies"][0]["type"] == "nan_inf"


def test_a_nan_inside_a_group_or_a_tensor_is_flagged_at_once_too(tmp_path: Path) -> None:
    body = f"""
    import torch
    callback.on_train_begin()
    for step in range(5):
        callback.on_step_end(step, {HEALTHY})
    callback.on_step_end(5, {{"timing": {{"gen": 1.0}}, "loss": torch.tensor(float("inf"))}})
    """
    status = killed_after(tmp_path, "background=True", body)
    assert status["anomaly_detected"] is True
    assert status["anomaly_reason"].startswith("nan_inf: ")


def test_an_anomaly_a_detector_finds_is_on_disk_when_the_inline_hook_returns(
    tmp_path: Path,
) -> None:
    body = f"""
    callback.on_train_begin()
    for step in range(30):
        callback.on_step_end(step, {HEALTHY})
    callback.on_step_end(30, {{**{HEALTHY}, "actor/kl_loss": 5.0}})
    """
    status = killed_after(tmp_path, "stop_on_anomaly=False, background=False", body)
    assert status["anomaly_reason"].startswith("kl_explosion: ")


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        ("callback.on_train_end()", ("completed", None)),
        ("callback.on_exception(RuntimeError('oom'))", ("failed", "RuntimeError: oom")),
        ("callback.on_exception(KeyboardInterrupt())", ("stopped", "KeyboardInterrupt")),
    ],
)
def test_the_final_status_is_on_disk_when_the_last_hook_returns(
    tmp_path: Path, hook: str, expected: tuple[str, str | None]
) -> None:
    body = f"""
    callback.on_train_begin(total_steps=700)
    for step in range(700):
        callback.on_step_end(step, {HEALTHY})
    {hook}
    """
    status = killed_after(tmp_path, "background=True", body)
    assert (status["status"], status["error"]) == expected
    # A completed 0-based loop of 700 steps did 700 of 700; a failed one was at step 699.
    assert status["current_step"] == (700 if expected[0] == "completed" else 699)
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 700  # lines before the status


def test_per_step_progress_still_arrives_coalesced_from_the_writer(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, status_interval=0.05)
    callback.on_train_begin(total_steps=1000)
    status_path = tmp_path / "job_status.json"
    written_at = status_path.stat().st_mtime_ns
    for step in range(500):
        callback.on_step_end(step, {"loss": 1.0})
    deadline = time.monotonic() + 10
    while read_status(status_path)["current_step"] < 499 and time.monotonic() < deadline:
        callback.on_step_end(499, {"loss": 1.0})  # keeps the writer busy past the interval
        time.sleep(0.06)
    status = read_status(status_path)
    assert (status["status"], status["current_step"]) == ("running", 499)
    assert status_path.stat().st_mtime_ns > written_at
    callback.on_train_end()


def test_a_status_file_never_goes_back_while_both_threads_write_it(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, status_interval=0.0)  # writer: every step
    status_path = tmp_path / "job_status.json"
    order = {"pending": 0, "running": 1, "completed": 2}
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(json.loads(status_path.read_bytes()))  # never torn: no retry

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        callback.on_train_begin(total_steps=3000)
        for step in range(3000):
            loss = float("nan") if step == 1500 else 1.0
            callback.on_step_end(step, {"loss": loss})
        callback.on_train_end()
    finally:
        done.set()
        watcher.join(timeout=30)
    assert len(seen) > 20
    for before, after in itertools.pairwise(seen):
        assert order[after["status"]] >= order[before["status"]], (before, after)
        assert after["anomaly_detected"] >= before["anomaly_detected"], (before, after)
        if after["status"] == before["status"]:
            assert after["current_step"] >= before["current_step"], (before, after)
    final = read_status(status_path)
    assert (final["status"], final["current_step"], final["anomaly_detected"]) == (
        "completed",
        3000,
        True,
    )


def test_status_writes_from_two_threads_always_leave_the_newest_state(tmp_path: Path) -> None:
    """Without one lock around update + write, a thread that serialised the
    dict before the other's change can rename its older file over the newer."""
    writer = RecordWriter(
        job_id="job",
        metrics_path=tmp_path / "job_metrics.jsonl",
        status_path=tmp_path / "job_status.json",
        monitor=None,
        stop_severity=None,
        fsync="never",
        status_interval=0.0,
        clock=time.time,
    )
    rounds = 400
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def total_steps_writer() -> None:
        for value in range(rounds):
            writer.set_status(total_steps=value)

    def reason_writer() -> None:
        for value in range(rounds):
            writer.set_status(anomaly_reason=str(value))

    def reader() -> None:
        while not done.is_set():
            status = read_status(tmp_path / "job_status.json")
            seen.append((status["total_steps"] or 0, int(status["anomaly_reason"] or 0)))

    writer.set_status()
    threads = [threading.Thread(target=f) for f in (total_steps_writer, reason_writer)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    done.set()
    watcher.join(timeout=30)
    final = read_status(tmp_path / "job_status.json")
    assert (final["total_steps"], final["anomaly_reason"]) == (rounds - 1, str(rounds - 1))
    for (steps_before, reason_before), (steps_after, reason_after) in itertools.pairwise(seen):
        assert steps_after >= steps_before and reason_after >= reason_before
