"""The measurements behind `profile-inference`: a batch-size sweep of a torch model.

For each batch size: `warmup` untimed runs, then at least `runs` timed runs
(the GPU is synchronised around each, so a latency is the whole forward),
continued until `min_time_s` of timed work has accumulated (at most
`max_runs`), so that a busy machine's hiccups are a few runs among many. A
dataset target times every batch of one pass at least (accuracy then
covers the whole dataset); a synthetic one times the same batch. Latencies
outside Tukey's fences (1.5 IQR beyond the quartiles) are counted as
outliers and reported; the statistics keep them (they are what a user sees).
An out-of-memory batch size is recorded as ``oom`` and the sweep goes on.
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
]
_STATS = ("mean", "std", "min", "max", "p50", "p95")


@dataclass
class BatchResult:
    """The measurements of one batch size (`status` ``ok`` or ``oom``)."""

    batch_size: int
    status: str = "ok"
    runs: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    per_sample_ms: dict[str, float] = field(default_factory=dict)
    outliers: int = 0
    cv: float | None = None  # std / mean of the latencies
    total_time_s: float | None = None
    samples_per_second: float | None = None
    batches_per_second: float | None = None
    tokens_per_second: float | None = None
    peak_memory_mib: float | None = None  # GPU peak on CUDA, else the process RSS
    cpu_rss_mib: float | None = None
    gpu_allocated_mib: float | None = None
    gpu_peak_mib: float | None = None
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
    latencies: list[float] = []
    tokens = 0
    seen: set[int] = set()
    correct = 0
    output: Any = None
    with torch.inference_mode():
        index = 0
        while True:
            timed = index >= warmup
            part = (
                dataset(batch_size, index - warmup if timed else index, device) if dataset else None
            )
            inputs = part.inputs if part is not None else batch
            _sync(device)
            start = clock()
            output = forward(target.model, inputs)
            _sync(device)
            elapsed = clock() - start
            memory.sample()
            if timed:
                latencies.append(elapsed * 1000.0)
                if part is not None:
                    tokens += part.tokens
                    correct += _score(target, output, part, seen)
                elif target.tokens_per_sample:
                    tokens += target.tokens_per_sample * batch_size
            index += 1
            if on_run is not None:
                on_run()
            done = len(latencies) >= runs and sum(latencies) >= min_time_s * 1000.0
            if done or len(latencies) >= cap:
                break
    result = summarise(batch_size, latencies, tokens)
    memory.fill(result)
    if dataset is not None and seen and target.predict is not None:
        result.accuracy = correct / len(seen)
    elif accuracy is not None:
        result.accuracy = float(accuracy(output, batch))
    return result


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
    """Latency statistics, rates and outliers of one batch size's timed runs."""
    stats = describe(latencies)
    total_s = math.fsum(latencies) / 1000.0
    result = BatchResult(batch_size, runs=len(latencies), total_time_s=total_s)
    result.latency_ms = {k: stats[k] for k in _STATS}
    result.per_sample_ms = {k: stats[k] / batch_size for k in _STATS}
    result.outliers = count_outliers(latencies)
    if stats["mean"]:
        result.cv = stats["std"] / stats["mean"]
        result.samples_per_second = batch_size * len(latencies) / total_s
        result.batches_per_second = len(latencies) / total_s
        result.tokens_per_second = tokens / total_s if tokens else None
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
    on_run: Callable[[], None] | None = None,
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
                on_run=on_run,
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


def best_batch_size(
    results: Sequence[BatchResult], max_latency_ms: float | None = None
) -> tuple[BatchResult | None, str]:
    """The highest-throughput batch size (within a p95 latency budget when given), and why.

    The reason gives the margin over the runner-up. Throughputs within the
    measurement noise of the best (two standard errors of the difference of
    their means) are a tie, and the smallest tied batch size is recommended:
    same throughput, lower latency and memory.
    """
    usable = [r for r in results if r.status == "ok" and r.samples_per_second]
    if max_latency_ms is not None:
        within = [r for r in usable if r.latency_ms["p95"] <= max_latency_ms]
        if not within:
            return None, f"no batch size keeps p95 latency within {max_latency_ms:g} ms"
        usable = within
    if not usable:
        return None, "no batch size completed"
    ranked = sorted(usable, key=lambda r: r.samples_per_second or 0.0, reverse=True)
    top = ranked[0]
    tied = [r for r in ranked[1:] if _within_noise(top, r)]
    best = min([top, *tied], key=lambda r: r.batch_size)
    reason = f"highest throughput ({best.samples_per_second:.1f} samples/s"
    if max_latency_ms is not None:
        reason += f" with p95 latency {best.latency_ms['p95']:.2f} ms <= {max_latency_ms:g} ms"
    reason += ")"
    others = [r for r in ranked if r is not best]
    if others:
        runner = others[0]
        margin = (best.samples_per_second or 0.0) / (runner.samples_per_second or 1.0) - 1.0
        reason += (
            f"; {margin:+.1%} over the runner-up, batch size {runner.batch_size} "
            f"({runner.samples_per_second:.1f} samples/s)"
        )
    if tied:
        sizes = ", ".join(
            str(r.batch_size) for r in sorted([top, *tied], key=lambda r: r.batch_size)
        )
        reason += f"; sizes {sizes} are within measurement noise, so the smallest is chosen"
    largest = max(r.batch_size for r in usable)
    if best.batch_size < largest and not tied:
        # Throughput that falls with larger batches means the device is saturated.
        reason += f"; larger batches up to {largest} gave no more throughput"
    elif best.batch_size == largest and max_latency_ms is None and _all_ok(results):
        reason += "; the largest size tried: larger ones may do better still"
    return best, reason


def _all_ok(results: Sequence[BatchResult]) -> bool:
    return all(r.status == "ok" for r in results)


def _within_noise(a: BatchResult, b: BatchResult) -> bool:
    """Whether two throughputs differ by less than two standard errors of the difference."""
    if not (a.cv and b.cv and a.runs and b.runs and a.samples_per_second and b.samples_per_second):
        return False
    error = math.sqrt(a.cv**2 / a.runs + b.cv**2 / b.runs)
    return abs(a.samples_per_second / b.samples_per_second - 1.0) < 2.0 * error
