"""The measurements behind `profile-inference`: a batch-size sweep of a torch model.

The model comes from ``module:factory`` (``tiny`` is the built-in
`tiny_model:build`). The input of one batch comes, first found, from
``--inputs module:fn`` (``fn(batch_size, device)``), the model's own
``make_batch(batch_size, device)``, or ``--input-shape`` (random floats of
shape ``(batch_size, *shape)``). A batch that is a tuple is passed as
positional arguments, a dict as keyword arguments.

For each batch size: `warmup` untimed runs, then `runs` timed runs of the
same batch (the GPU is synchronised around each, so a latency is the whole
forward), then the accuracy hook once, outside the timed region. A CUDA
out-of-memory error ends the sweep (larger batches would fail too) and is
recorded; any other error is the model's and propagates.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training_platform.callbacks.memory import rss_reader
from training_platform.callbacks.stats import describe

BUILTIN_MODELS = {"tiny": "training_platform.tools.tiny_model:build"}
MIB = float(1 << 20)
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``module:attribute`` (``tiny`` and other built-in names allowed)."""
    spec = BUILTIN_MODELS.get(spec, spec)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{spec!r}: expected 'module:factory' (e.g. mypkg.models:build)")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target


def resolve_device(name: str) -> torch.device:
    """``auto`` picks the first GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but no CUDA GPU is available")
    return device


@dataclass
class InferenceTarget:
    """A model ready to run, with the way to make one batch of input."""

    name: str
    model: nn.Module
    make_batch: Callable[[int, torch.device], Any]
    tokens_per_sample: int | None = None


def load_target(
    model_spec: str,
    *,
    device: torch.device,
    dtype: str = "float32",
    inputs_spec: str | None = None,
    input_shape: Sequence[int] | None = None,
) -> InferenceTarget:
    """Build the model from its factory, move it to `device`/`dtype` and find its inputs."""
    model = load_callable(model_spec)()
    if not isinstance(model, nn.Module):
        raise TypeError(f"{model_spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    torch_dtype = _DTYPES[dtype]
    model = model.to(device=device, dtype=torch_dtype).eval()
    own_maker = getattr(model, "make_batch", None)
    make_batch: Callable[[int, torch.device], Any]
    if inputs_spec:
        make_batch = load_callable(inputs_spec)
    elif callable(own_maker):
        make_batch = own_maker
    elif input_shape:
        shape = tuple(input_shape)

        def random_floats(batch_size: int, dev: torch.device) -> torch.Tensor:
            return torch.randn((batch_size, *shape), device=dev, dtype=torch_dtype)

        make_batch = random_floats

    else:
        raise ValueError(
            f"cannot make inputs for {model_spec!r}: give --inputs module:fn or --input-shape, "
            "or give the model a make_batch(batch_size, device) method"
        )
    tokens = getattr(model, "tokens_per_sample", None)
    return InferenceTarget(
        model_spec, model, make_batch, tokens if isinstance(tokens, int) else None
    )


def _forward(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


@dataclass
class BatchResult:
    """The measurements of one batch size (`status` ``ok`` or ``oom``)."""

    batch_size: int
    status: str = "ok"
    latency_ms: dict[str, float] = field(default_factory=dict)
    per_sample_ms: dict[str, float] = field(default_factory=dict)
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    peak_memory_mib: float | None = None
    accuracy: float | None = None
    error: str | None = None


class PeakMemory:
    """Peak memory of a batch: torch's allocator peak on CUDA, sampled process RSS on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.source = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "process RSS"
        self._rss = rss_reader() if device.type != "cuda" else None
        self._peak = 0

    def reset(self) -> None:
        self._peak = 0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def sample(self) -> None:
        # On CPU only RSS after a run (outputs still alive) is visible; activations
        # freed inside the forward are missed, so this is a lower bound.
        if self._rss is not None:
            self._peak = max(self._peak, self._rss() or 0)

    def peak_mib(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / MIB
        return self._peak / MIB if self._peak else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_batch(
    target: InferenceTarget,
    batch_size: int,
    *,
    device: torch.device,
    warmup: int,
    runs: int,
    accuracy: Callable[[Any, Any], float] | None = None,
    memory: PeakMemory | None = None,
    on_run: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BatchResult:
    """Warm up, then time `runs` forwards of one batch of `batch_size`."""
    memory = memory or PeakMemory(device)
    memory.reset()
    batch = target.make_batch(batch_size, device)
    latencies: list[float] = []
    output: Any = None
    with torch.inference_mode():
        for index in range(warmup + runs):
            _sync(device)
            start = clock()
            output = _forward(target.model, batch)
            _sync(device)
            if index >= warmup:
                latencies.append((clock() - start) * 1000.0)
            memory.sample()
            if on_run is not None:
                on_run()
    stats = describe(latencies)
    result = BatchResult(batch_size)
    result.latency_ms = {k: stats[k] for k in ("mean", "p50", "p95")}
    result.per_sample_ms = {k: stats[k] / batch_size for k in ("mean", "p50", "p95")}
    result.samples_per_second = batch_size * 1000.0 / stats["mean"] if stats["mean"] else None
    if target.tokens_per_sample and result.samples_per_second:
        result.tokens_per_second = result.samples_per_second * target.tokens_per_sample
    result.peak_memory_mib = memory.peak_mib()
    if accuracy is not None:
        result.accuracy = float(accuracy(output, batch))
    return result


def run_sweep(
    target: InferenceTarget,
    batch_sizes: Sequence[int],
    *,
    device: torch.device,
    warmup: int = 3,
    runs: int = 10,
    accuracy: Callable[[Any, Any], float] | None = None,
    on_run: Callable[[], None] | None = None,
) -> list[BatchResult]:
    """`measure_batch` for each batch size, ascending; stops at the first CUDA OOM."""
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
                accuracy=accuracy,
                memory=memory,
                on_run=on_run,
            )
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            results.append(BatchResult(batch_size, status="oom", error=str(exc).splitlines()[0]))
            break
        results.append(result)
    return results


def best_batch_size(
    results: Sequence[BatchResult], max_latency_ms: float | None = None
) -> tuple[BatchResult | None, str]:
    """The highest-throughput batch size (within a p95 latency budget when given), and why."""
    usable = [r for r in results if r.status == "ok" and r.samples_per_second]
    if max_latency_ms is not None:
        within = [r for r in usable if r.latency_ms["p95"] <= max_latency_ms]
        if not within:
            return None, f"no batch size keeps p95 latency within {max_latency_ms:g} ms"
        usable = within
    if not usable:
        return None, "no batch size completed"
    best = max(usable, key=lambda r: r.samples_per_second or 0.0)
    reason = f"highest throughput ({best.samples_per_second:.1f} samples/s"
    if max_latency_ms is not None:
        reason += f" with p95 latency {best.latency_ms['p95']:.2f} ms <= {max_latency_ms:g} ms"
    largest = max(r.batch_size for r in usable)
    if best.batch_size < largest:
        # Throughput that falls with larger batches means the device is saturated.
        reason += f"; larger batches up to {largest} gave no more throughput"
    elif all(r.status == "ok" for r in results) and max_latency_ms is None:
        reason += "; the largest size tried: larger ones may do better still"
    return best, reason + ")"


def trace_one_batch(
    target: InferenceTarget, batch_size: int, *, device: torch.device, path: Path
) -> Path:
    """A Chrome/Perfetto trace of one (warmed-up) forward of `batch_size` samples."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    batch = target.make_batch(batch_size, device)
    with torch.inference_mode():
        _forward(target.model, batch)  # warm-up: first-call costs are not the model's
        _sync(device)
        with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
            _forward(target.model, batch)
            _sync(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return path
