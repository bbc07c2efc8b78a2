"""`profile-inference`: sweep batch sizes, then write results, plots, a report and a trace.

The layout of `output_dir` (default ``results/``), the Week-1 baseline's:

- ``baseline_metrics.json``: the model (name, type, device, dtype), settings,
  environment, ``full_dataset_metrics`` and ``sample_size_metrics`` (with a
  dataset, `inference_samples`), ``batch_size_metrics`` (one entry per batch
  size), the best batch size and why;
- ``detailed_metrics.csv``: one row per batch size;
- ``baseline_summary_report.txt``: the model type, the table, the timing
  noise, the sample sizes and the recommended batch size;
- ``plots/``: ``batch_size_comparison.png`` (six panels), ``metrics_heatmap.png``,
  ``latency.png``, ``throughput.png``, ``memory.png`` (`inference_plots`),
  unless `plots` is off (``--skip-viz``);
- ``profiler/``: ``trace.json``, ``stacks.txt``, ``operators*.csv/txt`` of one
  forward at the best batch size (`inference_profiler`), unless `trace` is
  off (``--skip-profiling``);
- ``logs/profile_inference_<time>.log``: what the run did, step by step;
- ``label_mapping.json`` with a labelled dataset (`hf_target`).
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from training_platform.tools import inference_report
from training_platform.tools.gpu_utilisation import open_utilisation
from training_platform.tools.inference_samples import (
    no_dataset_metrics,
    run_first,
    sample_size_metrics,
)
from training_platform.tools.inference_sweep import (
    BatchResult,
    InferenceTarget,
    PeakMemory,
    best_batch_size,
    load_callable,
    load_target,
    resolve_device,
    run_sweep,
)
from training_platform.tools.inference_target import model_size

logger = logging.getLogger("training_platform.tools.profile_inference")
METRICS_JSON = "baseline_metrics.json"
METRICS_CSV = "detailed_metrics.csv"
SUMMARY = "baseline_summary_report.txt"


@dataclass(frozen=True)
class Options:
    """The settings of one run, as `run_profile` received them (batch sizes sorted)."""

    batch_sizes: list[int]
    warmup: int
    runs: int
    dtype: str
    inputs: str | None
    input_shape: Sequence[int] | None
    accuracy: str | None
    max_latency_ms: float | None
    trace: bool
    plots: bool
    progress: bool
    min_time_s: float
    hf_model: str | None
    dataset: Path | None
    dataset_name: str | None
    split: str
    columns: tuple[str, str]
    label_map: dict[str, int] | None
    max_length: int
    sample_sizes: list[int] = field(default_factory=list)


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
    dataset_name: str | None = None,
    split: str = "test",
    text_column: str = "text",
    label_column: str = "label",
    label_map: dict[str, int] | None = None,
    max_length: int = 128,
    sample_sizes: Sequence[int] = (),
) -> dict[str, Any]:
    """Run the sweep and write every output; returns what baseline_metrics.json holds.

    `hf_model` (a directory, cache entry or hub name) replaces `model`;
    `dataset` (a labelled CSV) or `dataset_name` (a Hugging Face dataset, its
    `split`) needs it, as do `sample_sizes`.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    with run_log(output_dir / "logs") as log_path:
        try:
            return _run(
                model,
                output_dir,
                log_path,
                resolve_device(device),
                Options(
                    batch_sizes=sorted(set(batch_sizes)),
                    warmup=warmup,
                    runs=runs,
                    dtype=dtype,
                    inputs=inputs,
                    input_shape=input_shape,
                    accuracy=accuracy,
                    max_latency_ms=max_latency_ms,
                    trace=trace,
                    plots=plots,
                    progress=progress,
                    min_time_s=min_time_s,
                    hf_model=hf_model,
                    dataset=dataset,
                    dataset_name=dataset_name,
                    split=split,
                    columns=(text_column, label_column),
                    label_map=label_map,
                    max_length=max_length,
                    sample_sizes=sorted(set(sample_sizes)),
                ),
            )
        except Exception as exc:
            logger.error("failed: %s", exc)
            raise


def _run(
    model: str, output_dir: Path, log_path: Path, torch_device: torch.device, o: Options
) -> dict[str, Any]:
    logger.info("profile-inference of %s on %s, %s", o.hf_model or model, torch_device, o)
    target = _target(model, torch_device, o, output_dir)
    model_info = model_size(target.model)
    logger.info("model loaded: %s (%s)", model_info, target.info.get("loaded_from", "factory"))
    if o.sample_sizes and not target.dataset_size:
        raise ValueError("sample sizes need a labelled dataset (--dataset or dataset.name)")
    accuracy_fn = load_callable(o.accuracy) if o.accuracy else None
    sizes = o.batch_sizes
    total = len(sizes) * (o.warmup + o.runs)
    with (
        open_utilisation(torch_device) as (utilisation, utilisation_source),
        _progress(o.progress, total, target.name) as advance,
    ):
        results = run_sweep(
            target,
            sizes,
            device=torch_device,
            warmup=o.warmup,
            runs=o.runs,
            min_time_s=o.min_time_s,
            accuracy=accuracy_fn,
            utilisation=utilisation,
            on_run=advance,
        )
    for result in results:
        logger.info("batch size %s: %s", result.batch_size, inference_report.row(result))
    best, reason = best_batch_size(results, o.max_latency_ms)
    logger.info("best batch size %s: %s", best.batch_size if best else None, reason)
    full, per_size = _sample_sizes(target, results, best, torch_device, o.sample_sizes)
    settings = {
        "model": o.hf_model or model,
        "device": str(torch_device),
        "dtype": o.dtype,
        "batch_sizes": sizes,
        "sample_sizes": o.sample_sizes,
        "warmup_runs": o.warmup,
        "measured_runs": o.runs,
        "min_time_s": o.min_time_s,
        "max_latency_ms": o.max_latency_ms,
        "tokens_per_sample": target.tokens_per_sample,
        **{k: v for k, v in target.info.items() if k != "hf_model"},
    }
    memory_source = PeakMemory(torch_device).source
    files = _write_figures(output_dir, target, results, best, torch_device, o)
    files["log"] = str(log_path)
    report = inference_report.render_report(
        results,
        title=target.name,
        best=best,
        reason=reason,
        memory_source=memory_source,
        settings=settings,
        model_info=model_info,
        utilisation_source=utilisation_source,
    )
    report += inference_report.render_sample_sizes(full, per_size)
    files["report"] = str(output_dir / SUMMARY)
    Path(files["report"]).write_text(report, encoding="utf-8")
    files["json"] = str(output_dir / METRICS_JSON)
    payload = {
        "model": settings["model"],
        "model_type": model_info["type"],
        "device": str(torch_device),
        "dtype": o.dtype,
        "settings": settings,
        "environment": _environment(torch_device),
        "model_info": model_info,
        "memory_source": memory_source,
        "gpu_utilization_source": utilisation_source,
        "full_dataset_metrics": full,
        "sample_size_metrics": per_size,
        "batch_size_metrics": inference_report.results_payload(results),
        "best_batch_size": best.batch_size if best else None,
        "best_reason": reason,
        "files": files,
    }
    inference_report.write_json(Path(files["json"]), payload)
    logger.info("wrote %s", ", ".join(sorted(files.values())))
    return payload


def _sample_sizes(
    target: InferenceTarget,
    results: Sequence[BatchResult],
    best: BatchResult | None,
    device: torch.device,
    sample_sizes: Sequence[int],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(full_dataset_metrics, sample_size_metrics) at the best batch size (else the
    smallest that ran: a latency budget nothing met still leaves an accuracy to give)."""
    done = [r for r in results if r.status == "ok"]
    chosen = best or (done[0] if done else None)
    if not target.dataset_size:
        return no_dataset_metrics(chosen.accuracy if chosen else None), []
    if chosen is None:
        return {"samples": target.dataset_size, "accuracy": None, "note": "no batch size ran"}, []
    size = chosen.batch_size
    full = run_first(target, target.dataset_size, batch_size=size, device=device)
    logger.info("full dataset at batch size %s: %s", size, full)
    per_size = sample_size_metrics(target, sample_sizes, batch_size=size, device=device)
    for entry in per_size:
        logger.info("first %s samples: %s", entry["requested"], entry)
    return full, per_size


def _write_figures(
    output_dir: Path,
    target: InferenceTarget,
    results: Sequence[BatchResult],
    best: BatchResult | None,
    device: torch.device,
    o: Options,
) -> dict[str, str]:
    """detailed_metrics.csv, plots/ and profiler/ ({output: path})."""
    files: dict[str, str] = {}
    if "label_mapping_file" in target.info:
        files["label_mapping"] = target.info["label_mapping_file"]
    files["csv"] = str(inference_report.write_csv(output_dir / METRICS_CSV, results))
    if o.plots and any(r.status == "ok" for r in results):
        from training_platform.tools import inference_plots

        plots = output_dir / "plots"
        plots.mkdir(exist_ok=True)
        for path in inference_report.plot_results(plots, results, target.name):
            files[path.stem] = str(path)
        files["comparison"] = str(inference_plots.plot_comparison(plots, results, target.name))
        files["heatmap"] = str(inference_plots.plot_heatmap(plots, results, target.name))
    if o.trace and best is not None:
        from training_platform.tools.inference_profiler import profile_one_batch

        files.update(
            profile_one_batch(
                target, best.batch_size, device=device, output_dir=output_dir / "profiler"
            )
        )
    return files


@contextmanager
def run_log(directory: Path) -> Iterator[Path]:
    """``logs/profile_inference_<time>.log``: this run's INFO records and above.

    The logger stops propagating meanwhile, so the step-by-step INFO lines
    go to the file only and the terminal keeps just the report.
    """
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = directory / f"profile_inference_{stamp}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(level)
        logger.propagate = propagate


def _target(model: str, device: torch.device, o: Options, output_dir: Path) -> InferenceTarget:
    if o.hf_model is None:
        if o.dataset is not None or o.dataset_name is not None:
            raise ValueError("--dataset needs --hf-model (a sequence classifier and its tokenizer)")
        return load_target(
            model, device=device, dtype=o.dtype, inputs_spec=o.inputs, input_shape=o.input_shape
        )
    from training_platform.tools.hf_target import load_hf_target

    return load_hf_target(
        o.hf_model,
        device=device,
        dtype=o.dtype,
        dataset=o.dataset,
        dataset_name=o.dataset_name,
        split=o.split,
        text_column=o.columns[0],
        label_column=o.columns[1],
        max_length=o.max_length,
        label_map=o.label_map,
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
