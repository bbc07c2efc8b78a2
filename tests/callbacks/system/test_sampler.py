"""The sampler thread, alone and as `PlatformCallback` runs it: lines at the interval, tagged
with the newest step, stopped at the end, never in training's way."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.system import fake_nvml
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.system import NoSampler, SystemSampler
from training_platform.callbacks.system import gpus as gpus_module
from training_platform.callbacks.system.host import HostReader

TOP_LEVEL = {"timestamp", "host", "step", "cpu", "memory", "disk", "network", "gpus"}


@pytest.fixture(autouse=True)
def recorded_h200(monkeypatch: pytest.MonkeyPatch) -> fake_nvml.FakeNvml:
    """Every sampler here sees the recorded H200 (the real library is replaced)."""
    monkeypatch.setattr(gpus_module, "_warned", set())
    fake = fake_nvml.busy()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def sampler_threads(job_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"platform-system-{job_id}"]


def test_the_callback_samples_on_its_own_thread_tagged_with_the_newest_step(tmp_path: Path) -> None:
    callback = PlatformCallback("sys1", tmp_path, system_metrics_interval=0.02)
    path = tmp_path / "sys1_system.jsonl"
    assert not path.exists() and sampler_threads("sys1") == []  # nothing before the run starts
    callback.on_train_begin(total_steps=3)
    (thread,) = sampler_threads("sys1")
    assert thread.daemon and thread.name == "platform-system-sys1"
    wait_for(lambda: len(lines(path)) >= 1)
    assert lines(path)[0]["step"] is None  # before the first step
    for step in range(3):
        callback.on_step_begin(step)
        wait_for(lambda: lines(path)[-1]["step"] == step)  # noqa: B023 (waited for here)
        callback.on_step_end(step, {"loss": 1.0})
    callback.on_train_end()
    assert sampler_threads("sys1") == []
    written = lines(path)
    assert len(path.read_bytes().splitlines()) == len(written)  # every line complete
    steps = [line["step"] for line in written if line["step"] is not None]
    assert steps == sorted(steps) and steps[-1] == 2
    for line in written:
        assert set(line) <= TOP_LEVEL and {"timestamp", "host", "cpu", "memory", "gpus"} <= set(
            line
        )
        assert line["gpus"][0]["name"] == "NVIDIA H200"
    time.sleep(0.06)
    assert lines(path) == written  # nothing after the end


def test_lines_come_at_the_interval(tmp_path: Path) -> None:
    sampler = SystemSampler(tmp_path / "s.jsonl", 0.05)
    started = time.time()
    sampler.start()
    wait_for(lambda: len(lines(sampler.path)) >= 5)
    sampler.stop()
    stamps = [line["timestamp"] for line in lines(sampler.path)]
    assert stamps[0] - started < 0.5  # the first at once
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    # On a grid of 0.05 s: sample k never before start + k x 0.05 (a late one does not
    # push the rest back, so one gap may be short; on average they are the interval).
    assert 0.045 < sum(gaps) / len(gaps) < 0.2, gaps


def test_an_interval_of_0_is_no_thread_and_no_file(tmp_path: Path) -> None:
    callback = PlatformCallback("sys0", tmp_path, system_metrics_interval=0)
    assert isinstance(callback._system, NoSampler)
    callback.on_train_begin()
    assert sampler_threads("sys0") == []
    callback.on_step_end(0, {"loss": 1.0})
    callback.on_train_end()
    assert not (tmp_path / "sys0_system.jsonl").exists()


def test_on_by_default_every_10_s_and_off_on_other_ranks(tmp_path: Path) -> None:
    default = PlatformCallback("sysd", tmp_path)
    assert isinstance(default._system, SystemSampler) and default._system.interval == 10.0
    other_rank = PlatformCallback("sysr", tmp_path, enabled=False)
    assert isinstance(other_rank._system, NoSampler)


def test_a_negative_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        PlatformCallback("sysn", tmp_path, system_metrics_interval=-1)


def test_a_reader_that_raises_never_reaches_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(self: HostReader) -> dict[str, Any]:
        calls.append(threading.current_thread().name)
        raise RuntimeError("psutil broke")

    monkeypatch.setattr(HostReader, "read", broken)
    callback = PlatformCallback("sysx", tmp_path, system_metrics_interval=0.01)
    callback.on_train_begin()
    for step in range(5):
        callback.on_step_end(step, {"loss": 1.0})
    wait_for(lambda: len(calls) >= 3)
    callback.on_train_end()
    assert set(calls) == {"platform-system-sysx"}  # never the training thread
    assert json.loads((tmp_path / "sysx_status.json").read_text())["status"] == "completed"
    failures = [r for r in caplog.records if r.getMessage().startswith("the system sampler failed")]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING


def test_a_sampler_restarts_after_a_stop(tmp_path: Path) -> None:
    sampler = SystemSampler(tmp_path / "r.jsonl", 0.01)
    sampler.start()
    wait_for(lambda: len(lines(sampler.path)) >= 2)
    sampler.stop()
    before = len(lines(sampler.path))
    sampler.start()
    sampler.start()  # a no-op while it runs
    wait_for(lambda: len(lines(sampler.path)) >= before + 2)
    sampler.stop()
    assert all("gpus" in line for line in lines(sampler.path))  # NVML started again too
