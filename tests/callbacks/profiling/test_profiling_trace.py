"""torch.profiler on scheduled steps: trace JSON, op_stats.csv, graceful failure."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from training_platform.callbacks.profiling.step_profiler import StepProfiler, TraceSchedule
from training_platform.callbacks.profiling.torch_trace import op_stats_rows

torch = pytest.importorskip("torch")

REQUIRED_COLUMNS = ["op_name", "self_time_ms", "total_time_ms", "calls"]


def _train(profiler: StepProfiler, steps: int, first_step: int = 0) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(first_step, first_step + steps):
        profiler.on_step_begin(step)
        with profiler.stage("rollout"):
            logits = model(torch.randn(16, 32))
        with profiler.stage("update"):
            loss = -torch.log_softmax(logits, dim=-1)[:, 0].mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        profiler.on_step_end(step)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_scheduled_steps_give_a_loadable_trace_and_op_stats(tmp_path: Path) -> None:
    schedule = TraceSchedule(wait=2, warmup=1, active=2)
    with StepProfiler("trace-run", tmp_path, memory=False, trace=schedule) as profiler:
        _train(profiler, steps=8, first_step=100)
    profiles = tmp_path / "trace-run_profiles"
    # Steps 100-101 wait, 102 warms up, 103-104 are recorded.
    assert sorted(p.name for p in profiles.iterdir() if p.is_dir()) == ["step_103"]
    trace = json.loads((profiles / "step_103" / "trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::addmm" in names
    assert {"ProfilerStep#3", "ProfilerStep#4"} <= names  # the two recorded steps, no others
    assert not any(str(name).startswith("ProfilerStep#5") for name in names)

    rows = _read_csv(profiles / "step_103" / "op_stats.csv")
    assert list(rows[0])[:4] == REQUIRED_COLUMNS
    assert "self_cpu_memory_mb" in rows[0]
    by_name = {row["op_name"]: row for row in rows}
    assert int(by_name["aten::addmm"]["calls"]) == 2 * 2  # 2 linear layers x 2 steps
    self_times = [float(row["self_time_ms"]) for row in rows]
    assert self_times == sorted(self_times, reverse=True)
    addmm = by_name["aten::addmm"]
    assert float(addmm["total_time_ms"]) >= float(addmm["self_time_ms"]) > 0
    assert json.loads((profiles / "stage_times.json").read_text())["traces"] == ["step_103"]


def test_a_cycle_cut_short_by_close_is_still_written(tmp_path: Path) -> None:
    schedule = TraceSchedule(wait=0, warmup=1, active=5)
    with StepProfiler("short-run", tmp_path, memory=False, trace=schedule) as profiler:
        _train(profiler, steps=3)
    assert (tmp_path / "short-run_profiles" / "step_1" / "op_stats.csv").exists()


# repeat=3: torch warns that each cycle starts afresh, which is what we want.
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_a_profiler_failure_is_logged_once_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "blocked_profiles"
    blocker.write_text("a file where the profile directory should go")
    schedule = TraceSchedule(wait=0, warmup=1, active=1, repeat=3)
    profiler = StepProfiler("blocked", tmp_path, memory=False, trace=schedule)
    with caplog.at_level(logging.WARNING):
        _train(profiler, steps=6)
        profiler.close()
    warnings = [r for r in caplog.records if "torch.profiler failed" in r.getMessage()]
    assert len(warnings) == 1
    assert profiler.tracer is not None and not profiler.tracer.active
    assert profiler.timer.summary()["rollout"]["count"] == 6


def test_a_users_own_profiler_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = TraceSchedule(wait=1, warmup=1, active=1)
    profiler = StepProfiler("theirs", tmp_path, memory=False, trace=schedule)
    with caplog.at_level(logging.WARNING), torch.profiler.profile() as theirs:
        _train(profiler, steps=5)
        profiler.close()
    assert any("another torch profiler" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "theirs_profiles" / "step_2").exists()
    names = {event.key for event in theirs.key_averages()}
    assert "aten::addmm" in names  # ours never stopped theirs


def test_op_stats_has_cuda_time_and_memory_columns_when_cuda_was_profiled() -> None:
    event = SimpleNamespace(
        key="aten::mm",
        count=3,
        self_cpu_time_total=1500.0,
        cpu_time_total=2500.0,
        self_device_time_total=9000.0,
        device_time_total=9000.0,
        self_cpu_memory_usage=0,
        cpu_memory_usage=0,
        self_device_memory_usage=2 << 20,
        device_memory_usage=4 << 20,
    )
    (row,) = op_stats_rows([event], cuda=True, memory=True)
    assert row == {
        "op_name": "aten::mm",
        "self_time_ms": 1.5,
        "total_time_ms": 2.5,
        "calls": 3,
        "self_cuda_time_ms": 9.0,
        "cuda_time_ms": 9.0,
        "self_cpu_memory_mb": 0.0,
        "cpu_memory_mb": 0.0,
        "self_cuda_memory_mb": 2.0,
        "cuda_memory_mb": 4.0,
    }


def test_a_gpu_step_is_traced_with_cuda_columns(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    schedule = TraceSchedule(wait=0, warmup=1, active=1)
    model = torch.nn.Linear(256, 256).cuda()
    with StepProfiler("gpu-run", tmp_path, trace=schedule, cuda_sync=True) as profiler:
        for step in range(3):
            profiler.on_step_begin(step)
            with profiler.stage("forward"):
                model(torch.randn(64, 256, device="cuda")).sum().backward()
            profiler.on_step_end(step)
    rows = _read_csv(tmp_path / "gpu-run_profiles" / "step_1" / "op_stats.csv")
    assert {"self_cuda_time_ms", "cuda_time_ms", "cuda_memory_mb"} <= set(rows[0])
    assert sum(float(row["self_cuda_time_ms"]) for row in rows) > 0
