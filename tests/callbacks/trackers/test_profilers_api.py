"""The profiling API of the Profiling & Metrics layer, and its integration example."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from training_platform.callbacks.trackers.metrics import TrainingLogger
from training_platform.callbacks.trackers.profilers import (
    ComprehensiveProfiler,
    GPUMemoryProfiler,
    ThroughputTracker,
    TrainingTimer,
    resolve_cuda_index,
)

torch = pytest.importorskip("torch")
NO_GPU = "needs a CUDA GPU: no GPU on this machine"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_timer_start_and_stop_return_seconds_and_summarise() -> None:
    clock = FakeClock()
    timer = TrainingTimer(device=None, clock=clock)
    for seconds in (0.125, 0.25, 0.125):
        timer.start("forward")
        clock.now += seconds
        assert timer.stop("forward") == pytest.approx(seconds)
    timer.start("outer")
    timer.start("inner")  # flat names, even when nested
    clock.now += 1.0
    timer.stop("inner")
    timer.stop("outer")
    summary = timer.get_summary()
    assert summary["forward"]["count"] == 3
    assert summary["forward"]["mean_sec"] == pytest.approx(0.5 / 3)
    assert summary["forward"]["max_sec"] == pytest.approx(0.25)
    assert set(summary) == {"forward", "outer", "inner"}
    with pytest.raises(KeyError, match="not started"):
        timer.stop("backward")


def test_throughput_tracker_counts_time_between_updates() -> None:
    clock = FakeClock()
    tracker = ThroughputTracker(window_size=2, clock=clock)
    assert tracker.get_current_throughput() == {"samples_per_sec": 0.0, "tokens_per_sec": 0.0}
    for _ in range(3):
        clock.now += 0.5
        tracker.update(num_samples=8, num_tokens=1024)
    rates = tracker.get_current_throughput()
    assert rates["samples_per_sec"] == pytest.approx(16.0)
    assert rates["tokens_per_sec"] == pytest.approx(2048.0)


def test_memory_profiler_on_cpu_reports_rss_and_says_so() -> None:
    profiler = GPUMemoryProfiler(device="cpu")
    profiler.set_baseline()
    before = profiler.measure("before")
    assert before["source"].startswith("process RSS")
    assert before["allocated_gb"] > 0
    assert before["max_allocated_gb"] >= before["allocated_gb"]
    assert not profiler.detect_leak(threshold_gb=0.5)
    hold = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    after = profiler.measure("after")
    growth = profiler.leak_gb()
    assert growth is not None and growth > 0.05
    assert profiler.detect_leak(threshold_gb=0.05)
    assert not profiler.detect_leak(threshold_gb=0.5)
    assert after["allocated_gb"] > before["allocated_gb"]
    assert [len(profiler.history[tag]) for tag in ("baseline", "before", "after")] == [1, 1, 1]
    del hold


def test_memory_profiler_trend_detector_reports_a_steady_climb() -> None:
    profiler = GPUMemoryProfiler(device="cpu", leak_window=10, leak_min_growth_mib=16)
    kept = []
    for step in range(30):
        kept.append(torch.ones(4 * 1024 * 1024 // 4))  # +4 MiB per step, touched
        profiler.measure("step", step=step)
    assert profiler.trend_leaks, profiler.get_summary()
    assert profiler.trend_leaks[0]["type"] == "memory_leak"
    assert profiler.get_summary()["growth_mib_per_step"] > 2.0


def test_asking_for_a_gpu_without_one_measures_the_cpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    index, source = resolve_cuda_index(0)
    assert index is None and "no CUDA GPU" in source
    with pytest.raises(ValueError, match="use an index"):
        resolve_cuda_index("tpu")


def test_a_gpu_index_this_machine_lacks_is_refused() -> None:
    if not torch.cuda.is_available():
        pytest.skip(NO_GPU)
    with pytest.raises(ValueError, match="does not exist"):
        GPUMemoryProfiler(device=torch.cuda.device_count())


def test_gpu_memory_profiler_reads_the_allocator() -> None:
    if not torch.cuda.is_available():
        pytest.skip(NO_GPU)
    profiler = GPUMemoryProfiler(device=0)
    profiler.set_baseline()
    block = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
    stats = profiler.measure("after_alloc")
    assert stats["source"].startswith("torch.cuda")
    assert stats["allocated_gb"] >= 0.25
    assert stats["max_reserved_gb"] >= stats["reserved_gb"] >= stats["allocated_gb"]
    assert profiler.detect_leak(threshold_gb=0.2)
    timer = TrainingTimer(device=0)
    timer.start("matmul")
    torch.randn(2048, 2048, device="cuda:0") @ torch.randn(2048, 2048, device="cuda:0")
    assert timer.stop("matmul") > 0
    del block


class Batch(list[torch.Tensor]):
    total_tokens = 0


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch):
    inputs = torch.stack(list(batch))
    logits = model(inputs)
    loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    reward = float(logits.detach().softmax(-1)[:, 0].mean())
    scores = [1.0 if p > 0.5 else 0.0 for p in logits.detach().softmax(-1)[:, 0].tolist()] + [None]
    return float(loss), reward, scores


def test_the_integration_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    dataloader = []
    for _ in range(4):
        batch = Batch(torch.randn(8) for _ in range(6))
        batch.total_tokens = 6 * 8
        dataloader.append(batch)
    num_epochs = 2

    def training_step_of(batch: Batch):
        return training_step(model, optimizer, batch)

    # The layer's integration example, as its docs write it:
    profiler = ComprehensiveProfiler(device=0)
    logger = TrainingLogger("experiments/logs", "verifier_iter1")

    for epoch in range(num_epochs):
        for step, batch in enumerate(dataloader):
            profiler.start_iteration()
            loss, reward, scores = training_step_of(batch)
            profiler.end_iteration(num_samples=len(batch), num_tokens=batch.total_tokens)
            logger.log_step(step=step, metrics={"loss": loss, "reward": reward}, scores=scores)
        profiler.export_to_json(f"profiling_epoch{epoch}.json")
        logger.save_checkpoint_metrics(f"epoch{epoch}")

    profile = json.loads((tmp_path / "profiling_epoch1.json").read_text())
    assert {"timestamp", "device", "memory", "timing", "throughput"} <= set(profile)
    assert profile["device"] == 0
    assert profile["timing"]["iteration"]["count"] == 8
    assert profile["timing"]["iteration"]["mean_sec"] > 0
    assert profile["throughput"]["samples_per_sec"] > 0
    assert profile["throughput"]["tokens_per_sec"] == pytest.approx(
        profile["throughput"]["samples_per_sec"] * 8
    )
    memory = profile["memory"]
    assert memory["peak_allocated_gb"] >= memory["mean_allocated_gb"] > 0
    assert memory["baseline_gb"] > 0
    expected_source = "torch.cuda" if torch.cuda.is_available() else "process RSS"
    assert memory["source"].startswith(expected_source)

    metrics = json.loads(
        (tmp_path / "experiments/logs/verifier_iter1/epoch1_metrics.json").read_text()
    )
    assert metrics["metric_summaries"]["loss"]["count"] == 8
    first, last = metrics["raw_metrics"]["loss"][:4], metrics["raw_metrics"]["loss"][4:]
    assert sum(last) < sum(first)  # the model learned: the losses are real
    assert metrics["score_distribution"]["invalid_count"] == 8
    assert "torch" in sys.modules
