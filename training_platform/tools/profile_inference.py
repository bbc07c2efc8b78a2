"""`profile-inference`: sweep batch sizes, then write results, plots, a report and a trace.

Files written to `output_dir`:

- ``results.csv`` and ``results.json`` (settings, environment, one entry per
  batch size, the best batch size and why);
- ``latency.png``, ``throughput.png``, ``memory.png`` against batch size;
- ``report.txt``: the table and the recommended batch size;
- ``trace.json``: a Chrome/Perfetto trace of one forward at the best batch size.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from training_platform.tools import inference_report
from training_platform.tools.inference_sweep import (
    PeakMemory,
    best_batch_size,
    load_callable,
    load_target,
    resolve_device,
    run_sweep,
    trace_one_batch,
)


def run_profile(
    model: str,
    output_dir: Path,
    *,
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
    warmup: int = 3,
    runs: int = 10,
    device: str = "auto",
    dtype: str = "float32",
    inputs: str | None = None,
    input_shape: Sequence[int] | None = None,
    accuracy: str | None = None,
    max_latency_ms: float | None = None,
    trace: bool = True,
    plots: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the sweep and write every output; returns what results.json holds."""
    torch_device = resolve_device(device)
    target = load_target(
        model, device=torch_device, dtype=dtype, inputs_spec=inputs, input_shape=input_shape
    )
    accuracy_fn = load_callable(accuracy) if accuracy else None
    output_dir.mkdir(parents=True, exist_ok=True)
    sizes = sorted(set(batch_sizes))
    with _progress(progress, len(sizes) * (warmup + runs), target.name) as advance:
        results = run_sweep(
            target,
            sizes,
            device=torch_device,
            warmup=warmup,
            runs=runs,
            accuracy=accuracy_fn,
            on_run=advance,
        )
    best, reason = best_batch_size(results, max_latency_ms)
    settings = {
        "model": model,
        "device": str(torch_device),
        "dtype": dtype,
        "batch_sizes": sizes,
        "warmup_runs": warmup,
        "measured_runs": runs,
        "max_latency_ms": max_latency_ms,
        "tokens_per_sample": target.tokens_per_sample,
    }
    memory_source = PeakMemory(torch_device).source
    files: dict[str, str] = {}
    files["csv"] = str(inference_report.write_csv(output_dir / "results.csv", results))
    if plots:
        for path in inference_report.plot_results(output_dir, results, target.name):
            files[path.stem] = str(path)
    if trace and best is not None:
        path = trace_one_batch(
            target, best.batch_size, device=torch_device, path=output_dir / "trace.json"
        )
        files["trace"] = str(path)
    report = inference_report.render_report(
        results,
        title=target.name,
        best=best,
        reason=reason,
        memory_source=memory_source,
        settings=settings,
    )
    files["report"] = str(output_dir / "report.txt")
    Path(files["report"]).write_text(report, encoding="utf-8")
    files["json"] = str(output_dir / "results.json")
    payload = {
        "settings": settings,
        "environment": _environment(torch_device),
        "memory_source": memory_source,
        "results": inference_report.results_payload(results),
        "best_batch_size": best.batch_size if best else None,
        "best_reason": reason,
        "files": files,
    }
    inference_report.write_json(Path(files["json"]), payload)
    return payload


def _environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


@contextmanager
def _progress(enabled: bool, total: int, name: str) -> Iterator[Callable[[], None]]:
    """Yields an `advance()` callable: one tick of a rich progress bar per run."""
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeRemainingColumn()) as bar:
        task = bar.add_task(f"profiling {name}", total=total)
        yield lambda: bar.advance(task)
