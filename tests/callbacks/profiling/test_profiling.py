"""Stage timer, throughput and the step profiler as a step contributor."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from training_platform.callbacks.profiling.memory import MemoryMonitor
from training_platform.callbacks.profiling.stage_timer import StageTimer
from training_platform.callbacks.profiling.step_profiler import (
    StepProfiler,
    ThroughputMeter,
    TraceSchedule,
)


class FakeClock:
    """A clock the test moves by hand: stage times become exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_stage_times_match_known_sleeps() -> None:
    timer = StageTimer()
    with timer.stage("short"):
        time.sleep(0.02)
    with timer.stage("long"):
        time.sleep(0.06)
    times = timer.collect()
    # sleep() never returns early; a loaded machine may add a little, never 25 ms.
    assert 0.02 <= times["short"] < 0.02 + 0.025
    assert 0.06 <= times["long"] < 0.06 + 0.025


def test_nested_stages_are_named_by_path_and_the_parent_includes_the_child() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)
    with timer.stage("update"):
        clock.advance(1.0)
        with timer.stage("actor"):
            clock.advance(2.0)
            with timer.stage("backward"):
                clock.advance(0.5)
        with timer.stage("critic"):
            clock.advance(3.0)
    assert timer.collect() == {
        "update/actor/backward": 0.5,
        "update/actor": 2.5,
        "update/critic": 3.0,
        "update": 6.5,
    }


def test_a_stage_entered_twice_in_a_step_adds_up_and_collect_starts_a_new_step() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)
    for seconds in (0.25, 0.75):
        with timer.stage("reward"):
            clock.advance(seconds)
    assert timer.collect() == {"reward": 1.0}
    assert timer.collect() == {}
    assert timer.summary()["reward"]["count"] == 1


def test_stages_timed_in_several_threads_all_land_in_the_step_and_the_summary() -> None:
    timer = StageTimer()
    ready = threading.Barrier(4)

    def work() -> None:
        ready.wait(5)
        for _ in range(500):
            with timer.stage("rollout"), timer.stage("generate"):
                pass

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    collected: list[dict[str, float]] = []
    while any(worker.is_alive() for worker in workers):
        collected.append(timer.collect())  # racing the workers' stages
    collected.append(timer.collect())
    for worker in workers:
        worker.join()

    steps = [times for times in collected if times]
    assert set().union(*steps) == {"rollout", "rollout/generate"}, "each thread nests on its own"
    summary = timer.summary()
    assert summary["rollout"]["count"] == len([t for t in steps if "rollout" in t])
    assert summary["rollout"]["total"] == pytest.approx(sum(t.get("rollout", 0) for t in steps))


def test_changing_the_collected_dict_does_not_change_the_summary() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)
    for _ in range(300):  # past one fold of the run-long statistics
        with timer.stage("reward"):
            clock.advance(0.5)
        timing = timer.collect()
        timing["reward"] = 99.0  # the record's timing group, merged by a callback
        timing["other"] = 1.0
    summary = timer.summary()
    assert set(summary) == {"reward"}
    assert summary["reward"]["count"] == 300 and summary["reward"]["total"] == 150.0


def test_stage_as_a_decorator_times_every_call_of_sync_and_async_functions() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)

    @timer.stage("rollout")
    def rollout(seconds: float) -> str:
        clock.advance(seconds)
        return "done"

    @timer.stage("score")
    async def score(seconds: float) -> int:
        clock.advance(seconds)
        return 7

    assert rollout(1.0) == "done"
    assert rollout(2.0) == "done"
    assert asyncio.run(score(0.5)) == 7
    assert rollout.__name__ == "rollout"
    assert timer.collect() == {"rollout": 3.0, "score": 0.5}


def test_an_exception_inside_a_stage_is_timed_and_reaches_the_caller() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)
    with pytest.raises(ZeroDivisionError), timer.stage("update"):
        clock.advance(0.3)
        _ = 1 / 0
    with timer.stage("next"):  # the nesting stack was unwound
        clock.advance(0.1)
    assert timer.collect() == pytest.approx({"update": 0.3, "next": 0.1})


def test_a_recursive_decorated_function_nests_under_itself() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)

    @timer.stage("search")
    def search(depth: int) -> None:
        clock.advance(1.0)
        if depth:
            search(depth - 1)

    search(2)
    assert timer.collect() == {"search": 3.0, "search/search": 2.0, "search/search/search": 1.0}


def test_coroutines_interleaving_on_one_thread_each_get_their_own_time() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)

    @timer.stage("fetch")
    async def fetch(seconds_before: float, seconds_after: float) -> None:
        clock.advance(seconds_before)
        await asyncio.sleep(0)  # the other coroutine runs here, its stage open too
        clock.advance(seconds_after)

    async def both() -> None:
        await asyncio.gather(fetch(1.0, 10.0), fetch(100.0, 1000.0))

    asyncio.run(both())
    # The second call opened while the first was open on the same thread, so
    # it is named as nested. The first leaves first, its stage no longer on
    # top of the thread's stack: it is taken off from below, not left there
    # for every later stage to nest under.
    assert timer.collect() == {"fetch": 1.0 + 100.0 + 10.0, "fetch/fetch": 100.0 + 10.0 + 1000.0}
    with timer.stage("after"):  # nothing was left open on the stack
        clock.advance(1.0)
    assert timer.collect() == {"after": 1.0}


def test_summary_has_count_mean_p50_p95_and_total_per_stage() -> None:
    clock = FakeClock()
    timer = StageTimer(clock=clock)
    for seconds in (1.0, 2.0, 3.0, 4.0, 10.0):
        with timer.stage("gen"):
            clock.advance(seconds)
        timer.collect()
    stats = timer.summary()["gen"]
    assert stats["count"] == 5
    assert stats["total"] == pytest.approx(20.0)
    assert stats["mean"] == pytest.approx(4.0)
    assert stats["p50"] == pytest.approx(3.0)
    assert stats["p95"] == pytest.approx(8.8)  # numpy.percentile([1, 2, 3, 4, 10], 95)


def test_cuda_sync_is_off_and_says_so_without_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the CUDA test below covers it")
    assert StageTimer(cuda_sync=True).cuda_sync is False


def test_throughput_is_total_work_over_total_time_in_the_window() -> None:
    meter = ThroughputMeter(window=2)
    assert meter.record(1.0, samples=10, tokens=100) == (10.0, 100.0)
    assert meter.record(3.0, samples=10, tokens=100) == (5.0, 50.0)
    # The first step left the window: only the last two count.
    assert meter.record(1.0, samples=40, tokens=400) == (12.5, 125.0)


def test_throughput_stays_exact_over_a_long_run() -> None:
    meter = ThroughputMeter(window=5)
    for _ in range(200_000):  # a long run: the totals grow, the window's rate must not drift
        rates = meter.record(0.1, samples=7, tokens=0)
    assert rates[0] == pytest.approx(70.0, rel=1e-9)
    # A change in pace shows fully once the window has passed.
    for _ in range(5):
        rates = meter.record(0.2, samples=7, tokens=0)
    assert rates[0] == pytest.approx(35.0, rel=1e-9)


def test_throughput_is_none_when_no_work_was_counted() -> None:
    meter = ThroughputMeter(window=3)
    assert meter.record(1.0, samples=0, tokens=0) == (None, None)
    assert meter.record(1.0, samples=4, tokens=0) == (2.0, None)


def _run_steps(profiler: StepProfiler, clock: FakeClock, steps: int) -> dict:
    result: dict = {}
    for step in range(steps):
        profiler.on_step_begin(step)
        with profiler.stage("rollout"):
            clock.advance(0.6)
        with profiler.stage("update_actor"):
            clock.advance(0.4)
        profiler.add_batch(samples=8, tokens=800)
        result = profiler.on_step_end(step)
        clock.advance(1.0)  # between steps: data loading, logging
    return result


def test_step_profiler_returns_design_groups_for_the_record() -> None:
    clock = FakeClock()
    profiler = StepProfiler(memory=False, clock=clock, throughput_window=4)
    result = _run_steps(profiler, clock, steps=3)
    assert result["timing"] == pytest.approx({"rollout": 0.6, "update_actor": 0.4})
    assert result["performance"]["step_time"] == pytest.approx(1.0)
    # 3 steps: 1 s, then two of 2 s each (1 s between steps counts): 24 samples / 5 s.
    assert result["performance"]["tokens_per_second"] == pytest.approx(2400 / 5)
    assert result["extra"]["profiling/samples_per_second"] == pytest.approx(24 / 5)
    assert "anomalies" not in result


def test_step_profiler_is_a_step_contributor() -> None:
    base = pytest.importorskip("training_platform.callbacks.base")
    assert isinstance(StepProfiler(memory=False), base.StepContributor)


def test_platform_callback_writes_the_profilers_groups_into_each_record(tmp_path: Path) -> None:
    platform_callback = pytest.importorskip("training_platform.callbacks.platform_callback")
    profiler = StepProfiler("prof-run", tmp_path)
    callback = platform_callback.PlatformCallback(
        "prof-run", tmp_path, contributors=[profiler], enable_anomaly_detection=False
    )
    callback.on_train_begin(total_steps=3)
    for step in range(3):
        callback.on_step_begin(step)
        with profiler.stage("rollout"):
            time.sleep(0.001)
        profiler.add_batch(samples=2, tokens=20)
        callback.on_step_end(step, {"loss": {"actor_loss": 1.0}})
    callback.on_train_end()
    profiler.close()
    lines = (tmp_path / "prof-run_metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [0, 1, 2]
    last = records[-1]
    assert last["timing"]["rollout"] >= 0.001
    assert last["performance"]["step_time"] >= last["timing"]["rollout"]
    assert last["performance"]["tokens_per_second"] > 0
    assert last["loss"] == {"actor_loss": 1.0}
    assert (tmp_path / "prof-run_profiles" / "stage_times.json").exists()


def test_memory_figures_go_to_extra_without_a_gpu() -> None:
    profiler = StepProfiler(memory=MemoryMonitor(rss=lambda: 3 << 30))
    profiler.mark_baseline()
    profiler.on_step_begin(0)
    result = profiler.on_step_end(0)
    assert result["extra"]["profiling/rss_gib"] == pytest.approx(3.0)
    assert result["extra"]["profiling/rss_above_baseline_gib"] == pytest.approx(0.0)


def test_stage_times_json_is_written_on_close_as_standard_json(tmp_path: Path) -> None:
    clock = FakeClock()
    with StepProfiler("run-1", tmp_path, memory=False, clock=clock) as profiler:
        _run_steps(profiler, clock, steps=4)
    path = tmp_path / "run-1_profiles" / "stage_times.json"
    text = path.read_text()
    assert "NaN" not in text
    summary = json.loads(text)
    assert summary["job_id"] == "run-1"
    assert summary["steps"] == 4
    assert summary["stages"]["rollout"] == pytest.approx(
        {"count": 4, "mean": 0.6, "p50": 0.6, "p95": 0.6, "total": 2.4}
    )
    assert summary["step_time"]["mean"] == pytest.approx(1.0)


def test_stage_times_json_is_rewritten_every_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    profiler = StepProfiler("run-2", tmp_path, memory=False, clock=clock, summary_interval_s=5.0)
    path = tmp_path / "run-2_profiles" / "stage_times.json"
    _run_steps(profiler, clock, steps=2)  # 2 steps of 2 s each: not yet due
    assert not path.exists()
    _run_steps(profiler, clock, steps=2)
    assert json.loads(path.read_text())["steps"] == 3  # written at the step crossing 5 s


def test_without_a_job_id_nothing_is_written_and_traces_are_refused(tmp_path: Path) -> None:
    profiler = StepProfiler(output_dir=tmp_path, memory=False)
    profiler.on_step_begin(0)
    profiler.on_step_end(0)
    profiler.close()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="job_id"):
        StepProfiler(trace=TraceSchedule())


def test_an_invalid_job_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid job_id"):
        StepProfiler("../escape", tmp_path)


def test_a_failing_memory_probe_is_logged_once_and_training_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_rss() -> int:
        raise OSError("procfs is gone")

    profiler = StepProfiler(memory=MemoryMonitor(rss=broken_rss))
    with caplog.at_level(
        logging.WARNING, logger="training_platform.callbacks.profiling.step_profiler"
    ):
        results = []
        for step in range(5):
            profiler.on_step_begin(step)
            with profiler.stage("rollout"):
                pass
            results.append(profiler.on_step_end(step))
    failures = [r for r in caplog.records if "memory failed" in r.getMessage()]
    assert len(failures) == 1
    assert all("rollout" in result["timing"] for result in results)


def test_importing_profiling_loads_no_torch_server_or_plotting_modules() -> None:
    code = (
        "import sys, training_platform.callbacks.profiling.step_profiler\n"
        "import training_platform.callbacks.trackers.metric_tracker\n"
        "heavy = {'torch', 'fastapi', 'sqlalchemy', 'matplotlib', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_profiler_works_where_torch_is_not_installed(tmp_path: Path) -> None:
    # A meta-path finder that refuses torch stands in for an environment without it.
    code = f"""
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
sys.meta_path.insert(0, NoTorch())
from training_platform.callbacks.profiling.memory import MemoryMonitor
from training_platform.callbacks.profiling.step_profiler import StepProfiler, TraceSchedule
profiler = StepProfiler("no-torch", {str(tmp_path)!r}, cuda_sync=True,
                        trace=TraceSchedule(wait=0, warmup=0, active=1))
for step in range(3):
    profiler.on_step_begin(step)
    with profiler.stage("rollout"):
        pass
    result = profiler.on_step_end(step)
profiler.close()
assert "rollout" in result["timing"], result
assert "torch" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (tmp_path / "no-torch_profiles" / "stage_times.json").exists()


def test_cuda_sync_charges_gpu_work_to_the_stage_that_launched_it() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    torch.cuda.init()
    synced, unsynced = StageTimer(cuda_sync=True), StageTimer()
    assert synced.cuda_sync and not unsynced.cuda_sync
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gpu_work() -> None:
        torch.cuda._sleep(50_000_000)  # spins the GPU for tens of milliseconds

    torch.cuda.synchronize()
    with unsynced.stage("gpu"):
        gpu_work()  # only the launch is seen on the host
    torch.cuda.synchronize()
    with synced.stage("gpu"):
        start.record()
        gpu_work()
        end.record()
    gpu_seconds = start.elapsed_time(end) / 1000.0
    assert gpu_seconds > 0.005
    assert synced.collect()["gpu"] >= 0.9 * gpu_seconds
    assert unsynced.collect()["gpu"] < 0.5 * gpu_seconds


def test_stage_times_json_carries_throughput_memory_peak_mean_trend_leaks_and_device(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    rss = iter(range(100 << 20, 1 << 40, 8 << 20))  # +8 MiB every sample: a leak
    memory = MemoryMonitor(
        rss=lambda: next(rss), clock=clock, min_interval_s=0.0,
        leak_window=10, leak_min_growth_mib=32, leak_warmup_steps=0,
    )  # fmt: skip
    profiler = StepProfiler("summary-v2", tmp_path, memory=memory, clock=clock)
    profiler.mark_baseline()
    for step in range(30):
        profiler.on_step_begin(step)
        with profiler.stage("rollout"):
            clock.advance(0.5)
        profiler.add_batch(samples=8, tokens=80)
        profiler.on_step_end(step)
    profiler.close()
    data = json.loads((tmp_path / "summary-v2_profiles" / "stage_times.json").read_text())
    assert data["version"] == 2 and data["device"]["type"] == "cpu"
    assert data["throughput"] == {
        "seconds": 15.0, "samples": 240, "tokens": 2400,
        "samples_per_second": 16.0, "tokens_per_second": 160.0,
    }  # fmt: skip
    mib = 1 / 1024
    assert data["memory"]["samples"] == 30
    assert data["memory"]["peak"]["rss_gib"] == pytest.approx((100 + 8 * 30) * mib)
    assert data["memory"]["mean"]["rss_gib"] == pytest.approx((100 + 8 * 15.5) * mib)
    trend = data["memory"]["trend"]["rss_gib"]
    assert trend["slope_mib_per_step"] == pytest.approx(8.0) and trend[
        "r_squared"
    ] == pytest.approx(1.0)
    assert (trend["from_step"], trend["to_step"]) == (0, 29)
    assert data["memory"]["leaks"][0]["type"] == "memory_leak"
    assert data["overhead"]["traced_steps"] == 0 and data["overhead"]["trace_export_seconds"] == 0.0


def test_a_version_1_reader_still_finds_its_keys(tmp_path: Path) -> None:
    """The keys stage_times.json had before version 2 keep their shape."""
    with StepProfiler("old-keys", tmp_path, memory=False) as profiler:
        profiler.on_step_begin(0)
        profiler.on_step_end(0)
    data = json.loads((tmp_path / "old-keys_profiles" / "stage_times.json").read_text())
    assert {"job_id", "updated_at", "steps", "percentile_window", "cuda_sync", "step_time",
            "stages", "memory", "traces"} <= set(data)  # fmt: skip
    assert data["memory"] == {"baseline": None, "last": None}
