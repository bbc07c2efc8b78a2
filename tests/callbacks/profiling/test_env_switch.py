"""$PLATFORM_PROFILE turns the kit on in PlatformCallback; off, or mistyped, it changes nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from training_platform.callbacks.platform_callback import PlatformCallback
from training_platform.callbacks.profiling.env_switch import (
    env_profiler,
    profiling_requested,
    trace_schedule,
    with_env_profiler,
)
from training_platform.callbacks.profiling.step_profiler import StepProfiler


@pytest.mark.parametrize("value", ["1", "true", "ON", " yes "])
def test_the_switch_is_on_for_the_usual_spellings(value: str) -> None:
    assert profiling_requested({"PLATFORM_PROFILE": value})


@pytest.mark.parametrize("value", ["", "0", "false", "off"])
def test_the_switch_is_off_unset_or_off(value: str) -> None:
    assert not profiling_requested({"PLATFORM_PROFILE": value})
    assert not profiling_requested({})


def test_a_mistyped_switch_is_logged_and_leaves_profiling_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert not profiling_requested({"PLATFORM_PROFILE": "maybe"})
    assert "PLATFORM_PROFILE='maybe'" in caplog.text


def test_the_trace_window_is_read_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    schedule = trace_schedule({"PLATFORM_PROFILE_TRACE": "3,0,4"})
    assert schedule is not None
    assert (schedule.wait, schedule.warmup, schedule.active, schedule.repeat) == (3, 0, 4, 1)
    assert trace_schedule({"PLATFORM_PROFILE_TRACE": "off"}) is None
    default = trace_schedule({})
    assert default is not None and (default.wait, default.warmup, default.active) == (5, 1, 2)
    with caplog.at_level(logging.WARNING):
        bad = trace_schedule({"PLATFORM_PROFILE_TRACE": "3,1,0"})  # active must be >= 1
    assert bad is not None and bad.active == 2
    assert "PLATFORM_PROFILE_TRACE='3,1,0'" in caplog.text


def test_a_profiler_is_added_only_when_asked_and_only_once(tmp_path: Path) -> None:
    on = {"PLATFORM_PROFILE": "1"}
    assert with_env_profiler("run1", tmp_path, [], {}) == []
    (added,) = with_env_profiler("run1", tmp_path, [], on)
    assert isinstance(added, StepProfiler)
    assert added.profile_dir == tmp_path / "run1_profiles"
    own = StepProfiler("run1", tmp_path)
    assert with_env_profiler("run1", tmp_path, [own], on) == [own]  # the script's own wins
    assert env_profiler("run1", tmp_path, {}) is None
    assert isinstance(env_profiler("run1", tmp_path, on), StepProfiler)


def test_the_callback_profiles_its_run_when_the_switch_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLATFORM_PROFILE", raising=False)
    plain = PlatformCallback("plain", tmp_path, system_metrics_interval=0)
    assert plain.contributors == []
    monkeypatch.setenv("PLATFORM_PROFILE", "1")
    monkeypatch.setenv("PLATFORM_PROFILE_TRACE", "off")
    callback = PlatformCallback("profiled", tmp_path, system_metrics_interval=0)
    (profiler,) = callback.contributors
    assert isinstance(profiler, StepProfiler) and profiler.tracer is None
    callback.on_train_begin(total_steps=3)
    for step in range(3):
        callback.on_step_begin(step)
        callback.on_step_end(step, {"loss": {"actor_loss": 1.0}})
    callback.on_train_end()  # closes the profiler: the final stage_times.json
    summary = tmp_path / "profiled_profiles" / "stage_times.json"
    assert summary.is_file()
    assert '"steps": 3' in summary.read_text()
    assert not (tmp_path / "plain_profiles").exists()
