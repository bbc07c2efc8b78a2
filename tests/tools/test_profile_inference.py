"""profile-inference: the sweep, the best batch size, and every output end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

pytest.importorskip("torch", reason="profile-inference profiles torch models")
import torch

from training_platform.tools.cli import profile_inference
from training_platform.tools.inference_profiler import profile_one_batch
from training_platform.tools.inference_sweep import (
    BatchResult,
    InferenceTarget,
    best_batch_size,
    load_callable,
    load_target,
    run_sweep,
    warm_up,
)

app = typer.Typer()
app.command()(profile_inference)
CPU = torch.device("cpu")


class TwoInputs(torch.nn.Module):
    """A model taking two tensors: its batches are tuples."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.transpose(-1, -2)


def make_linear() -> torch.nn.Module:
    return torch.nn.Linear(8, 2)


def make_two_inputs() -> torch.nn.Module:
    return TwoInputs()


def two_input_batch(batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, 4, device=device), torch.randn(
        batch_size, 3, 4, device=device
    )


def oom_at_4(batch_size: int, device: torch.device) -> torch.Tensor:
    if batch_size == 4:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return torch.randn(batch_size, 8, device=device)


HERE = __name__


def test_the_tiny_model_end_to_end_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "profile"
    args = ["-b", "1,2,4", "--warmup", "1", "--runs", "3", "-o", str(out), "--no-progress"]
    args += ["--accuracy", "training_platform.tools.tiny_model:next_token_accuracy"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    expected = ["detailed_metrics.csv", "baseline_metrics.json", "baseline_summary_report.txt"]
    expected += ["plots/latency.png", "plots/throughput.png", "plots/memory.png"]
    expected += ["plots/batch_size_comparison.png", "plots/metrics_heatmap.png"]
    expected += ["profiler/trace.json", "profiler/stacks.txt", "profiler/operators.csv"]
    expected += ["profiler/operators_cpu.txt", "profiler/operators_memory.txt"]
    for name in expected:
        assert (out / name).stat().st_size > 0, name
    (log,) = (out / "logs").glob("profile_inference_*.log")
    log_text = log.read_text()
    assert "batch size 4: {" in log_text and "best batch size" in log_text
    assert "batch size 4: {" not in result.output  # the step-by-step lines go to the log only

    payload = json.loads((out / "baseline_metrics.json").read_text())
    assert payload["files"]["log"] == str(log)
    assert (payload["model_type"], payload["device"], payload["dtype"]) == (
        "TinyTransformer",
        "cpu",
        "float32",
    )
    # No dataset: the --accuracy hook's figure at the best batch size stands for the whole.
    full = payload["full_dataset_metrics"]
    assert full["samples"] is None and 0.0 <= full["accuracy"] <= 1.0
    assert payload["sample_size_metrics"] == []
    assert payload["gpu_utilization_source"] == "not measured: the run is on the CPU"
    results = payload["batch_size_metrics"]
    assert [r["batch_size"] for r in results] == [1, 2, 4]
    for r in results:
        assert r["status"] == "ok"
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p95"]
        assert r["per_sample_ms"]["mean"] == pytest.approx(
            r["latency_ms"]["mean"] / r["batch_size"]
        )
        assert r["samples_per_second"] == pytest.approx(
            r["batch_size"] * 1000 / r["latency_ms"]["p50"]
        )
        assert r["tokens_per_second"] == pytest.approx(r["samples_per_second"] * 32)
        assert r["peak_memory_mib"] > 0 and r["cpu_rss_mib"] == r["peak_memory_mib"]
        assert r["gpu_peak_mib"] is None  # on the CPU: RSS only, said apart
        assert 0.0 <= r["accuracy"] <= 1.0
        assert r["runs"] == 3 and r["latency_ms"]["std"] >= 0 and r["outliers"] >= 0
        assert r["batches_per_second"] == pytest.approx(1000 / r["latency_ms"]["p50"])
        assert r["warmup_runs"] >= 1 and r["robust_cv"] >= 0
        assert r["total_time_s"] == pytest.approx(3 * r["latency_ms"]["mean"] / 1000)
        assert r["samples_per_second_per_gib"] == pytest.approx(
            r["samples_per_second"] / (r["peak_memory_mib"] / 1024)
        )
        assert r["gpu_utilization_mean_pct"] is None and r["gpu_utilization_max_pct"] is None
    assert payload["model_info"]["parameters"] > 0 and payload["model_info"]["size_mb"] > 0
    report = (out / "baseline_summary_report.txt").read_text()
    assert "parameters" in report and "outlier(s) of 3 runs" in report
    assert "model type: TinyTransformer" in report
    assert "GPU utilisation: not measured: the run is on the CPU" in report
    assert "samples/s/GiB" in report
    # "+12.5% over the runner-up", "3.4x the throughput of the runner-up" (past double), or a tie.
    assert "the runner-up" in report or "within measurement noise" in report
    assert "USDT" not in result.output and "profiler_start" not in result.output
    best = payload["best_batch_size"]
    fastest = max(results, key=lambda r: r["samples_per_second"])["batch_size"]
    # The fastest, or a smaller size tied with it within the measurement noise.
    assert best == fastest or "within measurement noise" in payload["best_reason"]
    assert f"Best batch size: {best}" in report
    assert f"Best batch size: {best}" in result.output

    with (out / "detailed_metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(row["batch_size"]) for row in rows] == [1, 2, 4]
    assert {"latency_p95_ms", "per_sample_p50_ms", "peak_memory_mib"} <= set(rows[0])
    assert {"samples_per_second_per_gib", "gpu_utilization_mean_pct"} <= set(rows[0])

    trace = json.loads((out / "profiler/trace.json").read_text())
    assert any(event.get("name") == "aten::linear" for event in trace["traceEvents"])

    stacks = (out / "profiler/stacks.txt").read_text().splitlines()
    assert stacks and all(line.rsplit(" ", 1)[1].isdigit() for line in stacks)
    assert any("tiny_model.py" in line and "forward" in line for line in stacks)
    operators = (out / "profiler/operators.csv").read_text()
    assert "aten::linear" in operators and "self_cpu_memory_mb" in operators
    assert "aten::" in (out / "profiler/operators_cpu.txt").read_text()

    image = pytest.importorskip("matplotlib.image")
    names = ("latency.png", "throughput.png", "memory.png", "metrics_heatmap.png")
    for name in (*names, "batch_size_comparison.png"):
        pixels = image.imread(out / "plots" / name)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert pixels.std() > 0  # something was drawn


def test_a_model_with_tuple_inputs_from_an_inputs_function(tmp_path: Path) -> None:
    args = ["--model", f"{HERE}:make_two_inputs", "--inputs", f"{HERE}:two_input_batch"]
    args += ["-b", "1,3", "--warmup", "0", "--runs", "1", "-o", str(tmp_path)]
    args += ["--no-plots", "--no-trace", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "baseline_metrics.json").read_text())
    assert payload["batch_size_metrics"][0]["tokens_per_second"] is None  # no token count known
    assert not (tmp_path / "profiler").exists() and not (tmp_path / "plots").exists()


def test_input_shape_feeds_random_floats_of_that_shape() -> None:
    target = load_target(f"{HERE}:make_linear", device=CPU, input_shape=[8])
    assert target.make_batch(5, CPU).shape == (5, 8)
    results = run_sweep(target, [2, 1], device=CPU, warmup=0, runs=2)
    assert [r.batch_size for r in results] == [1, 2]


def test_a_model_without_a_way_to_make_inputs_is_refused() -> None:
    with pytest.raises(ValueError, match="--input-shape"):
        load_target(f"{HERE}:make_linear", device=CPU)


def test_a_bad_factory_is_a_clean_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--model", "no_such_module:build", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "No module named 'no_such_module'" in result.output
    with pytest.raises(ValueError, match="module:factory"):
        load_callable("just_a_name")


def test_an_out_of_memory_batch_is_recorded_and_the_sweep_goes_on() -> None:
    target = load_target(f"{HERE}:make_linear", device=CPU, inputs_spec=f"{HERE}:oom_at_4")
    results = run_sweep(target, [1, 2, 4, 8], device=CPU, warmup=0, runs=1)
    statuses = [(r.batch_size, r.status) for r in results]
    assert statuses == [(1, "ok"), (2, "ok"), (4, "oom"), (8, "ok")]
    assert "out of memory" in (results[2].error or "")
    best, _ = best_batch_size(results)
    assert best is not None and best.batch_size != 4


def _result(batch_size: int, samples_per_second: float, p95_ms: float) -> BatchResult:
    return BatchResult(
        batch_size,
        latency_ms={"mean": p95_ms, "p50": p95_ms, "p95": p95_ms},
        samples_per_second=samples_per_second,
    )


def test_sizes_tied_within_the_noise_recommend_the_smallest() -> None:
    a = _result(4, 1000.0, 4.0)
    b = _result(16, 1010.0, 16.0)
    c = _result(1, 400.0, 2.5)
    for r in (a, b, c):
        r.robust_cv, r.runs = 0.2, 10  # 20% spread over 10 runs: a 1% difference is noise
    best, reason = best_batch_size([c, a, b])
    assert best is a
    assert "sizes 4, 16 are within measurement noise (the fastest, batch size 16" in reason
    assert "over the runner-up" not in reason  # no "-1.0% over" a faster size
    b.robust_cv = a.robust_cv = 0.001  # a steady machine: 1% is real
    best, reason = best_batch_size([c, a, b])
    assert best is b and "+1.0% over the runner-up, batch size 4" in reason


def test_the_best_batch_size_has_the_most_throughput_within_the_latency_budget() -> None:
    results = [_result(1, 100.0, 10.0), _result(8, 500.0, 16.0), _result(32, 900.0, 35.0)]
    best, reason = best_batch_size(results)
    assert best is not None and best.batch_size == 32
    assert "larger ones may do better" in reason
    best, reason = best_batch_size(results, max_latency_ms=20.0)
    assert best is not None and best.batch_size == 8
    assert "p95 latency 16.00 ms <= 20 ms" in reason
    best, reason = best_batch_size(results, max_latency_ms=5.0)
    assert best is None and "within 5 ms" in reason


def test_a_gpu_sweep_reports_allocator_peak_memory(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    args = ["--device", "cuda", "-b", "1,8", "--warmup", "1", "--runs", "2", "-o", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--no-progress", "--dtype", "float16"])
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "baseline_metrics.json").read_text())
    assert payload["memory_source"] == "torch.cuda.max_memory_allocated"
    small, large = payload["batch_size_metrics"]
    assert large["peak_memory_mib"] >= small["peak_memory_mib"] > 0
    if payload["gpu_utilization_source"] == "NVML":  # NVML is there on a GPU machine
        assert 0 <= large["gpu_utilization_mean_pct"] <= large["gpu_utilization_max_pct"] <= 100
    trace = json.loads((tmp_path / "profiler/trace.json").read_text())
    assert any(event.get("cat") == "kernel" for event in trace["traceEvents"])


class SlowStart(torch.nn.Module):
    """Advances a fake clock: 1 ms + 0.25 ms a sample, but the first calls of the
    process take `slow_ms` (thread pools, kernel selection, ...)."""

    def __init__(self, slow_ms: tuple[float, ...] = (), hiccups: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.now = 0.0
        self.calls = 0
        self.slow_ms = slow_ms
        self.hiccups = hiccups  # call numbers that take 200 ms (a busy host)

    def clock(self) -> float:
        return self.now

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= len(self.slow_ms):
            cost_ms = self.slow_ms[self.calls - 1]
        elif self.calls in self.hiccups:
            cost_ms = 200.0
        else:
            cost_ms = 1.0 + 0.25 * x.shape[0]
        self.now += cost_ms / 1000.0
        return x


def _slow_start_target(model: SlowStart) -> InferenceTarget:
    return InferenceTarget("slow-start", model, lambda n, device: torch.zeros(n, 2))


def test_a_first_call_slower_than_the_warmup_runs_is_not_timed() -> None:
    # Five slow calls against three warm-up runs: the old sweep timed two of
    # them at batch size 1 and reported half its throughput.
    model = SlowStart(slow_ms=(50.0, 30.0, 20.0, 10.0, 5.0))
    results = run_sweep(
        _slow_start_target(model), [1, 4], device=CPU, warmup=3, runs=10, clock=model.clock
    )
    one, four = results
    assert one.warmup_runs == 7 and four.warmup_runs == 3  # 5 slow, then 2 steady
    assert one.latency_ms["max"] == pytest.approx(1.25)
    assert one.samples_per_second == pytest.approx(1000 / 1.25)
    assert four.samples_per_second == pytest.approx(4 * 1000 / 2.0)
    best, reason = best_batch_size(results)
    assert best is four and "2.5x the throughput of the runner-up, batch size 1" in reason


def test_one_hiccup_among_the_timed_runs_decides_nothing() -> None:
    # Call 5 is batch size 1's second timed run, after 3 warm-up runs.
    model = SlowStart(hiccups=(5,))
    results = run_sweep(
        _slow_start_target(model), [1, 4], device=CPU, warmup=3, runs=10, clock=model.clock
    )
    one, four = results
    assert one.outliers >= 1 and one.latency_ms["max"] == pytest.approx(200.0)
    assert one.samples_per_second == pytest.approx(1000 / 1.25)  # the median run's
    assert one.robust_cv == pytest.approx(0.0, abs=1e-6)
    best, reason = best_batch_size(results)
    assert best is four and "2.5x the throughput of the runner-up" in reason


def test_warm_up_stops_once_settled_and_is_capped_on_a_machine_that_never_settles() -> None:
    steady = iter([30.0, 10.0, 1.0, 1.1, 1.0])
    assert warm_up(lambda _: next(steady), 2) == 4  # 1.0 then 1.1: settled
    assert warm_up(lambda _: 1.0, 3) == 3  # already steady: just the runs asked for
    jumpy = iter([1.0, 5.0] * 20)
    assert warm_up(lambda _: next(jumpy), 3) == 3 + 10
    assert warm_up(lambda _: 1.0, 0) == 0  # --warmup 0 turns it off


def test_a_large_real_margin_reads_as_a_ratio_not_thousands_of_percent() -> None:
    small, large = _result(1, 100.0, 10.0), _result(32, 3200.0, 12.0)
    best, reason = best_batch_size([small, large])
    assert best is large and "32.0x the throughput of the runner-up, batch size 1" in reason
    assert "%" not in reason


def test_the_profiler_prints_none_of_kinetos_usdt_lines(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    target = load_target(f"{HERE}:make_linear", device=CPU, input_shape=[8])
    files = profile_one_batch(target, 2, device=CPU, output_dir=tmp_path)
    assert Path(files["trace"]).stat().st_size > 0
    captured = capfd.readouterr()
    assert "USDT" not in captured.err and "profiler_start" not in captured.err
    assert "USDT" not in captured.out


def test_sample_sizes_without_a_dataset_are_refused(tmp_path: Path) -> None:
    args = ["--sample-sizes", "10", "-b", "1", "--runs", "1", "-o", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--no-progress", "--no-plots", "--no-trace"])
    assert result.exit_code == 2
    assert "sample sizes need a labelled dataset" in result.output
    (log,) = (tmp_path / "logs").glob("*.log")
    assert "failed: sample sizes need a labelled dataset" in log.read_text()
