"""The measurements behind `profile-inference`: a batch-size sweep of a torch model.

For each batch size: at least `warmup` untimed runs, more until the latency
settles (`warm_up`: every batch size, not only the first, may pay first-call
costs such as kernel selection or allocator growth), then at least `runs`
timed runs (the GPU is synchronised around each, so a latency is the whole
forward; on CUDA, NVML's utilisation is polled meanwhile: `gpu_utilisation`),
continued until `min_time_s` of timed work has accumulated (at most
`max_runs`), so that a busy machine's hiccups are a few runs among many. A
dataset target times every batch of one pass at least (accuracy then
covers the whole dataset); a synthetic one times the same batch.

Throughputs come from the median latency, and the spread that decides a tie
from the interquartile range: one slow run moves neither. Latencies outside
Tukey's fences (1.5 IQR beyond the quartiles) are counted as outliers and
reported; the mean, std and p95 keep them (they are what a user sees). An
out-of-memory batch size is recorded as ``oom`` and the sweep goes on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from training_platform.callbacks.profiling.memory import rss_reader
from training_platform.callbacks.profiling.stats import describe, percentile
from training_platform.tools.gpu_utilisation import GpuUtilisation
from training_platform.tools.inference_choice import best_batch_size
from training_platform.tools.inference_target import (
    BUILTIN_MODELS,
    DTYPES,
    MIB,
    InferenceTarget,
    forward,
    load_callable,
    load_target,
    resolve_device,
)

__all__ = [
    "BUILTIN_MODELS",
    "DTYPES",
    "BatchResult",
    "InferenceTarget",
    "PeakMemory",
    "best_batch_size",
    "load_callable",
    "load_target",
    "measure_batch",
    "resolve_device",
    "run_sweep",
    "warm_up",
]
_STATS = ("mean", "std", "min", "max", "p50", "p95")
# Warm-up has settled when the last two runs are within 25% of each other and
# the last within 1.5x the fastest so far; past `warmup`, at most this many more.
_SETTLE_PAIR = 1.25
_SETTLE_FASTEST = 1.5
_EXTRA_WARMUP = 10
_NORMAL_IQR = 1.349  # interquartile range of a normal distribution, in standard deviations


@dataclass
class BatchResult:
    """The measurements of one batch size (`status` ``ok`` or ``oom``)."""

    batch_size: int
    status: str = "ok"
    runs: int = 0
    warmup_runs: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    per_sample_ms: dict[str, float] = field(default_factory=dict)
    outliers: int = 0
    cv: float | None = None  # std / mean of the latencies
    robust_cv: float | None = None  # IQR / 1.349 / median: the CV that ignores outliers
    total_time_s: float | None = None
    samples_per_second: float | None = None  # from the median latency, as are the other rates
    batches_per_second: float | None = None
    tokens_per_second: float | None = None
    peak_memory_mib: float | None = None  # GPU peak on CUDA, else the process RSS
    cpu_rss_mib: float | None = None
    gpu_allocated_mib: float | None = None
    gpu_peak_mib: float | None = None
    samples_per_second_per_gib: float | None = None  # memory efficiency: per GiB of peak memory
    gpu_utilization_mean_pct: float | None = None  # NVML, during the timed runs (CUDA only)
    gpu_utilization_max_pct: float | None = None
    accuracy: float | None = None
    error: str | None = None


class PeakMemory:
    """Memory of a batch size: process RSS (largest seen after a run), and on CUDA
    the allocator's current and peak allocation."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.source = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "process RSS"
        self._rss = rss_reader()
        self._peak_rss = 0

    def reset(self) -> None:
        self._peak_rss = 0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def sample(self) -> None:
        # RSS after a run (outputs still alive): activations freed inside the
        # forward are missed, so on CPU this is a lower bound of the peak.
        self._peak_rss = max(self._peak_rss, self._rss() or 0)

    def fill(self, result: BatchResult) -> None:
        result.cpu_rss_mib = self._peak_rss / MIB if self._peak_rss else None
        if self.device.type == "cuda":
            result.gpu_allocated_mib = torch.cuda.memory_allocated(self.device) / MIB
            result.gpu_peak_mib = torch.cuda.max_memory_allocated(self.device) / MIB
            result.peak_memory_mib = result.gpu_peak_mib
        else:
            result.peak_memory_mib = result.cpu_rss_mib


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_outliers(values: Sequence[float]) -> int:
    """Values beyond Tukey's fences: 1.5 interquartile ranges outside the quartiles."""
    ordered = sorted(values)
    if len(ordered) < 4:
        return 0
    q1, q3 = percentile(ordered, 25), percentile(ordered, 75)
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return sum(1 for v in ordered if v < low or v > high)


def measure_batch(
    target: InferenceTarget,
    batch_size: int,
    *,
    device: torch.device,
    warmup: int,
    runs: int,
    min_time_s: float = 0.0,
    max_runs: int | None = None,
    accuracy: Callable[[Any, Any], float] | None = None,
    memory: PeakMemory | None = None,
    utilisation: GpuUtilisation | None = None,
    on_run: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BatchResult:
    """Warm up, then time forwards of `batch_size` samples (see the module docstring)."""
    memory = memory or PeakMemory(device)
    memory.reset()
    dataset = target.batch_at if target.dataset_size else None
    if dataset is not None:
        runs = max(runs, math.ceil((target.dataset_size or 0) / batch_size))
    cap = max(runs, max_runs or 20 * runs)
    batch = target.make_batch(batch_size, device) if dataset is None else None

    def run(index: int) -> tuple[float, Any, Any]:
        """One synchronised forward: (milliseconds, output, the dataset batch or None)."""
        part = dataset(batch_size, index, device) if dataset is not None else None
        inputs = part.inputs if part is not None else batch
        _sync(device)
        start = clock()
        output = forward(target.model, inputs)
        _sync(device)
        elapsed = (clock() - start) * 1000.0
        memory.sample()
        return elapsed, output, part

    latencies: list[float] = []
    tokens = 0
    seen: set[int] = set()
    correct = 0
    output: Any = None
    with torch.inference_mode():
        warmed = warm_up(lambda index: run(index)[0], warmup, on_run=on_run)
        if utilisation is not None:
            utilisation.start()
        try:
            while True:
                elapsed, output, part = run(len(latencies))
                latencies.append(elapsed)
                if part is not None:
                    tokens += part.tokens
                    correct += _score(target, output, part, seen)
                elif target.tokens_per_sample:
                    tokens += target.tokens_per_sample * batch_size
                if on_run is not None:
                    on_run()
                done = len(latencies) >= runs and sum(latencies) >= min_time_s * 1000.0
                if done or len(latencies) >= cap:
                    break
        finally:
            # An OOM mid-way must not leave the poller running into the next size.
            reading = utilisation.stop() if utilisation is not None else None
    result = summarise(batch_size, latencies, tokens)
    result.warmup_runs = warmed
    memory.fill(result)
    if reading is not None:
        result.gpu_utilization_mean_pct = reading["mean"]
        result.gpu_utilization_max_pct = reading["max"]
    if result.samples_per_second and result.peak_memory_mib:
        result.samples_per_second_per_gib = result.samples_per_second / (
            result.peak_memory_mib / 1024.0
        )
    if dataset is not None and seen and target.predict is not None:
        result.accuracy = correct / len(seen)
    elif accuracy is not None:
        result.accuracy = float(accuracy(output, batch))
    return result


def warm_up(
    run: Callable[[int], float], warmup: int, *, on_run: Callable[[], None] | None = None
) -> int:
    """`warmup` untimed runs, then more until the latency settles; returns how many ran.

    `run(index)` does one forward and returns its latency. Settled: the last
    two runs within 25% of each other and the last within 1.5x the fastest,
    so a first call that pays for kernel selection or allocator growth is
    never timed. The extra runs are capped (at `warmup` or 10, whichever is
    more): a machine too noisy to settle is then timed as it is. `warmup` 0
    turns warming off. `on_run` ticks for the first `warmup` runs only, the
    ones a progress bar counts.
    """
    times: list[float] = []
    limit = warmup + max(warmup, _EXTRA_WARMUP) if warmup else 0
    while len(times) < limit:
        times.append(run(len(times)))
        if on_run is not None and len(times) <= warmup:
            on_run()
        if len(times) >= warmup and _settled(times):
            break
    return len(times)


def _settled(times: Sequence[float]) -> bool:
    if len(times) < 2:
        return False
    last, previous = times[-1], times[-2]
    steady = max(last, previous) <= _SETTLE_PAIR * min(last, previous)
    return steady and last <= _SETTLE_FASTEST * min(times)


def _score(target: InferenceTarget, output: Any, part: Any, seen: set[int]) -> int:
    """Correct predictions among samples not scored before (a wrapped batch repeats some)."""
    if target.predict is None or not part.labels:
        return 0
    correct = 0
    for sample, predicted, label in zip(
        part.indices, target.predict(output), part.labels, strict=True
    ):
        if sample not in seen:
            seen.add(sample)
            correct += int(predicted == label)
    return correct


def summarise(batch_size: int, latencies: list[float], tokens: int) -> BatchResult:
    """Latency statistics, rates and outliers of one batch size's timed runs.

    The rates divide by the median latency, not the total time: one run that
    paid a late warm-up or a hiccup of the host would otherwise set them.
    """
    stats = describe(latencies)
    total_s = math.fsum(latencies) / 1000.0
    result = BatchResult(batch_size, runs=len(latencies), total_time_s=total_s)
    result.latency_ms = {k: stats[k] for k in _STATS}
    result.per_sample_ms = {k: stats[k] / batch_size for k in _STATS}
    result.outliers = count_outliers(latencies)
    if stats["mean"]:
        result.cv = stats["std"] / stats["mean"]
    median = stats["p50"]
    if median > 0:
        ordered = sorted(latencies)
        iqr = percentile(ordered, 75) - percentile(ordered, 25)
        result.robust_cv = iqr / _NORMAL_IQR / median
        result.batches_per_second = 1000.0 / median
        result.samples_per_second = batch_size * result.batches_per_second
        per_run = tokens / len(latencies)
        result.tokens_per_second = per_run * result.batches_per_second if tokens else None
    return result


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def run_sweep(
    target: InferenceTarget,
    batch_sizes: Sequence[int],
    *,
    device: torch.device,
    warmup: int = 3,
    runs: int = 10,
    min_time_s: float = 0.0,
    accuracy: Callable[[Any, Any], float] | None = None,
    utilisation: GpuUtilisation | None = None,
    on_run: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[BatchResult]:
    """`measure_batch` for each batch size, ascending; an OOM size is recorded, not fatal."""
    if runs < 1 or warmup < 0:
        raise ValueError("runs must be >= 1 and warmup >= 0")
    memory = PeakMemory(device)
    results = []
    for batch_size in sorted(set(batch_sizes)):
        if batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_size}")
        try:
            result = measure_batch(
                target,
                batch_size,
                device=device,
                warmup=warmup,
                runs=runs,
                min_time_s=min_time_s,
                accuracy=accuracy,
                memory=memory,
                utilisation=utilisation,
                on_run=on_run,
                clock=clock,
            )
        except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
            if not _is_oom(exc):
                raise
            if device.type == "cuda":
                torch.cuda.empty_cache()
            first_line = (str(exc).splitlines() or ["out of memory"])[0]
            results.append(BatchResult(batch_size, status="oom", error=first_line))
            continue
        results.append(result)
    return results
