"""Outputs of `profile-inference`: detailed_metrics.csv, baseline_metrics.json, the
summary report (baseline_summary_report.txt) and the single-chart PNGs.

matplotlib is imported only when plots are drawn, with the Agg backend (no
display needed, safe in CI and on headless GPU nodes).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training_platform.callbacks.profiling.stats import finite_or_none
from training_platform.tools.inference_sweep import BatchResult

_STATS = ("mean", "std", "p50", "p95")
_FIELDS = (
    "runs",
    "warmup_runs",
    "outliers",
    "cv",
    "robust_cv",
    "total_time_s",
    "samples_per_second",
    "batches_per_second",
    "tokens_per_second",
    "peak_memory_mib",
    "cpu_rss_mib",
    "gpu_allocated_mib",
    "gpu_peak_mib",
    "samples_per_second_per_gib",
    "gpu_utilization_mean_pct",
    "gpu_utilization_max_pct",
    "accuracy",
)
CSV_COLUMNS = (
    "batch_size",
    "status",
    *(f"latency_{stat}_ms" for stat in _STATS),
    *(f"per_sample_{stat}_ms" for stat in _STATS),
    *_FIELDS,
)


def row(result: BatchResult) -> dict[str, Any]:
    """One batch size's figures by CSV column (also the log's line)."""
    values: dict[str, Any] = {"batch_size": result.batch_size, "status": result.status}
    for stat in _STATS:
        values[f"latency_{stat}_ms"] = result.latency_ms.get(stat)
        values[f"per_sample_{stat}_ms"] = result.per_sample_ms.get(stat)
    for name in _FIELDS:
        values[name] = getattr(result, name)
    return values


def write_csv(path: Path, results: Sequence[BatchResult]) -> Path:
    """One row per batch size; empty cells where a figure does not apply."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for result in results:
            writer.writerow(
                {
                    k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)
                    for k, v in row(result).items()
                }
            )
    return path


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.write_text(json.dumps(finite_or_none(payload), indent=2) + "\n", encoding="utf-8")
    return path


def results_payload(results: Sequence[BatchResult]) -> list[dict[str, Any]]:
    return [asdict(result) for result in results]


def plot_results(output_dir: Path, results: Sequence[BatchResult], title: str) -> list[Path]:
    """latency.png, throughput.png and memory.png against batch size (log2 x axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r.status == "ok"]
    sizes = [r.batch_size for r in ok]
    charts: list[tuple[str, str, dict[str, list[float | None]]]] = [
        (
            "latency.png",
            "latency per batch (ms)",
            {
                "mean": [r.latency_ms["mean"] for r in ok],
                "p50": [r.latency_ms["p50"] for r in ok],
                "p95": [r.latency_ms["p95"] for r in ok],
            },
        ),
        ("throughput.png", "samples / s", {"throughput": [r.samples_per_second for r in ok]}),
        ("memory.png", "peak memory (MiB)", {"peak memory": [r.peak_memory_mib for r in ok]}),
    ]
    paths = []
    for filename, ylabel, series in charts:
        figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for label, values in series.items():
            points = [(s, v) for s, v in zip(sizes, values, strict=True) if v is not None]
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", label=label)
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, [str(size) for size in sizes])  # 1 2 4 8, not 2^0 2^1 ...
        axes.minorticks_off()
        axes.set_xlabel("batch size")
        axes.set_ylabel(ylabel)
        axes.set_title(f"{title}: {ylabel}")
        axes.grid(True, alpha=0.3)
        if len(series) > 1:
            axes.legend()
        figure.tight_layout()
        path = output_dir / filename
        figure.savefig(path)
        plt.close(figure)
        paths.append(path)
    return paths


def render_report(
    results: Sequence[BatchResult],
    *,
    title: str,
    best: BatchResult | None,
    reason: str,
    memory_source: str,
    settings: dict[str, Any],
    model_info: dict[str, Any] | None = None,
    utilisation_source: str | None = None,
) -> str:
    """The summary: settings, the model, one line per batch size, noise, the recommendation."""
    lines = [f"Inference profile of {title}", ""]
    if model_info:
        kind, cls = model_info["type"], model_info["class"]
        lines.append(f"  model type: {kind}" + (f" ({cls})" if cls != kind else ""))
    lines += [f"  {key}: {value}" for key, value in settings.items()]
    if model_info:
        lines.append(
            f"  model: {model_info['parameters']:,.0f} parameters, {model_info['size_mb']:.2f} MB"
        )
    lines += ["", f"peak memory: {memory_source}"]
    if utilisation_source is not None:
        lines.append(f"GPU utilisation: {utilisation_source}")
    lines.append("")
    header = (
        f"{'batch':>6} {'runs':>5} {'mean ms':>9} {'std ms':>8} {'p50 ms':>9} {'p95 ms':>9} "
        f"{'ms/sample':>10} {'samples/s':>11} {'batches/s':>10} {'tokens/s':>11} "
        f"{'total s':>8} {'RSS MiB':>8} {'GPU MiB':>8} {'GPU peak':>9} {'accuracy':>9}"
    )
    lines.append(header)
    for r in results:
        if r.status != "ok":
            lines.append(f"{r.batch_size:>6} {r.status}: {r.error}")
            continue
        lat = r.latency_ms
        lines.append(
            f"{r.batch_size:>6} {r.runs:>5} {lat['mean']:>9.3f} {lat['std']:>8.3f} "
            f"{lat['p50']:>9.3f} {lat['p95']:>9.3f} {r.per_sample_ms['mean']:>10.4f} "
            f"{_num(r.samples_per_second, 11, 1)} {_num(r.batches_per_second, 10, 2)} "
            f"{_num(r.tokens_per_second, 11, 0)} {_num(r.total_time_s, 8, 3)} "
            f"{_num(r.cpu_rss_mib, 8, 1)} {_num(r.gpu_allocated_mib, 8, 1)} "
            f"{_num(r.gpu_peak_mib, 9, 1)} {_num(r.accuracy, 9, 4)}"
        )
    lines += [
        "",
        "samples/s, batches/s and tokens/s use the median latency: one slow run moves none.",
        "Timing noise (outliers: beyond 1.5 IQR of the quartiles; CV = std / mean;"
        " spread = IQR / 1.349 / median):",
    ]
    for r in results:
        if r.status == "ok":
            # Flag on the spread: one slow run already shows as an outlier.
            noisy = "  noisy: compare with care" if (r.robust_cv or 0.0) > 0.1 else ""
            lines.append(
                f"  batch {r.batch_size}: {r.warmup_runs} warm-up run(s), {r.outliers} outlier(s)"
                f" of {r.runs} runs, CV {_pct(r.cv)}, spread {_pct(r.robust_cv)}{noisy}"
            )
    lines.append("Memory efficiency (samples/s per GiB of peak memory) and GPU utilisation:")
    for r in results:
        if r.status == "ok":
            utilisation = (
                f"GPU {r.gpu_utilization_mean_pct:.0f}% mean, {r.gpu_utilization_max_pct:.0f}% max"
                if r.gpu_utilization_mean_pct is not None and r.gpu_utilization_max_pct is not None
                else "GPU utilisation -"
            )
            lines.append(
                f"  batch {r.batch_size}: {_num(r.samples_per_second_per_gib, 0, 1)} "
                f"samples/s/GiB, {utilisation}"
            )
    lines.append("")
    if best is None:
        lines.append(f"No best batch size: {reason}.")
    else:
        lines.append(f"Best batch size: {best.batch_size} — {reason}.")
    return "\n".join(lines) + "\n"


def render_sample_sizes(full: dict[str, Any], per_size: Sequence[dict[str, Any]]) -> str:
    """The full dataset's accuracy and speed, then the first N samples' for each N."""
    if full.get("samples") is None:
        return f"\nFull dataset: {full['note']}; accuracy {_num(full.get('accuracy'), 0, 4)}\n"
    lines = ["", f"Full dataset ({full['samples']} samples): {_sample_line(full)}"]
    if per_size:
        lines.append("Sample sizes (the first N samples, each run once):")
    for entry in per_size:
        capped = f" (capped at the dataset's {entry['samples']})" if entry["capped"] else ""
        lines.append(f"  first {entry['requested']}{capped}: {_sample_line(entry)}")
    return "\n".join(lines) + "\n"


def _sample_line(entry: dict[str, Any]) -> str:
    if entry.get("accuracy") is None:
        return entry.get("note", "not run")
    return (
        f"accuracy {entry['accuracy']:.4f} ({entry['correct']}/{entry['samples']}), "
        f"{_num(entry['samples_per_second'], 0, 1)} samples/s, "
        f"{_num(entry['latency_per_sample_ms'], 0, 3)} ms/sample, "
        f"{entry['total_time_s']:.3f} s at batch size {entry['batch_size']}"
    )


def _pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
