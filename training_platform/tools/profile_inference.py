"""`profile-inference`: sweep batch sizes, then write results, plots, a report and a trace.

Files written to `output_dir`:

- ``results.csv`` and ``results.json`` (settings, environment, one entry per
  batch size, the best batch size and why);
- ``latency.png``, ``throughput.png``, ``memory.png`` against batch size,
  ``batch_size_comparison.png`` (six panels) and ``metrics_heatmap.png``
  (`inference_plots`), unless `plots` is off (``--skip-viz``);
- ``report.txt``: the table, the timing noise and the recommended batch size;
- ``trace.json``, ``stacks.txt``, ``operators*.csv/txt``: torch.profiler of
  one forward at the best batch size (`inference_profiler`), unless `trace`
  is off (``--skip-profiling``);
- ``label_mapping.json`` with a labelled dataset (`hf_target`).
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
    InferenceTarget,
    PeakMemory,
    best_batch_size,
    load_callable,
    load_target,
    resolve_device,
    run_sweep,
)
from training_platform.tools.inference_target import model_size


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
    min_time_s: float = 0.0,
    hf_model: str | None = None,
    dataset: Path | None = None,
    text_column: str = "text",
    label_column: str = "label",
    label_map: dict[str, int] | None = None,
    max_length: int = 128,
) -> dict[str, Any]:
    """Run the sweep and write every output; returns what results.json holds.

    `hf_model` (a local directory or cache entry) replaces `model`; `dataset`
    (a labelled CSV) needs it.
    """
    torch_device = resolve_device(device)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = _target(
        model,
        torch_device,
        dtype,
        inputs=inputs,
        input_shape=input_shape,
        hf_model=hf_model,
        dataset=dataset,
        columns=(text_column, label_column),
        label_map=label_map,
        max_length=max_length,
        output_dir=output_dir,
    )
    accuracy_fn = load_callable(accuracy) if accuracy else None
    sizes = sorted(set(batch_sizes))
    with _progress(progress, len(sizes) * (warmup + runs), target.name) as advance:
        results = run_sweep(
            target,
            sizes,
            device=torch_device,
            warmup=warmup,
            runs=runs,
            min_time_s=min_time_s,
            accuracy=accuracy_fn,
            on_run=advance,
        )
    best, reason = best_batch_size(results, max_latency_ms)
    settings = {
        "model": hf_model or model,
        "device": str(torch_device),
        "dtype": dtype,
        "batch_sizes": sizes,
        "warmup_runs": warmup,
        "measured_runs": runs,
        "min_time_s": min_time_s,
        "max_latency_ms": max_latency_ms,
        "tokens_per_sample": target.tokens_per_sample,
        **{k: v for k, v in target.info.items() if k != "hf_model"},
    }
    model_info = model_size(target.model)
    memory_source = PeakMemory(torch_device).source
    files: dict[str, str] = {}
    if "label_mapping_file" in target.info:
        files["label_mapping"] = target.info["label_mapping_file"]
    files["csv"] = str(inference_report.write_csv(output_dir / "results.csv", results))
    if plots and any(r.status == "ok" for r in results):
        from training_platform.tools import inference_plots

        for path in inference_report.plot_results(output_dir, results, target.name):
            files[path.stem] = str(path)
        path = inference_plots.plot_comparison(output_dir, results, target.name)
        files["comparison"] = str(path)
        files["heatmap"] = str(inference_plots.plot_heatmap(output_dir, results, target.name))
    if trace and best is not None:
        from training_platform.tools.inference_profiler import profile_one_batch

        files.update(
            profile_one_batch(target, best.batch_size, device=torch_device, output_dir=output_dir)
        )
    report = inference_report.render_report(
        results,
        title=target.name,
        best=best,
        reason=reason,
        memory_source=memory_source,
        settings=settings,
        model_info=model_info,
    )
    files["report"] = str(output_dir / "report.txt")
    Path(files["report"]).write_text(report, encoding="utf-8")
    files["json"] = str(output_dir / "results.json")
    payload = {
        "settings": settings,
        "environment": _environment(torch_device),
        "model_info": model_info,
        "memory_source": memory_source,
        "results": inference_report.results_payload(results),
        "best_batch_size": best.batch_size if best else None,
        "best_reason": reason,
        "files": files,
    }
    inference_report.write_json(Path(files["json"]), payload)
    return payload


def _target(
    model: str,
    device: torch.device,
    dtype: str,
    *,
    inputs: str | None,
    input_shape: Sequence[int] | None,
    hf_model: str | None,
    dataset: Path | None,
    columns: tuple[str, str],
    label_map: dict[str, int] | None,
    max_length: int,
    output_dir: Path,
) -> InferenceTarget:
    if hf_model is None:
        if dataset is not None:
            raise ValueError("--dataset needs --hf-model (a sequence classifier and its tokenizer)")
        return load_target(
            model, device=device, dtype=dtype, inputs_spec=inputs, input_shape=input_shape
        )
    from training_platform.tools.hf_target import load_hf_target

    return load_hf_target(
        hf_model,
        device=device,
        dtype=dtype,
        dataset=dataset,
        text_column=columns[0],
        label_column=columns[1],
        max_length=max_length,
        label_map=label_map,
        output_dir=output_dir,
    )


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
