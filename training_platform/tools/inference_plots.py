"""`profile-inference`'s comparison plots: six panels against batch size, and a heatmap.

``batch_size_comparison.png``: latency per batch (mean ± std, p95), latency
per sample (mean, p95), throughput (samples/s), memory (CPU RSS, GPU
allocated, GPU peak), memory efficiency (samples/s per GiB of peak memory:
what a batch size buys for the memory it holds) and accuracy (tokens/s when
there is no accuracy, the latency CV when there are no tokens either).
``metrics_heatmap.png``: one row per batch size, one column per metric, each
column scaled to [0, 1] over the batch sizes (so the colours compare batch
sizes, not metrics), the raw value written in each cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training_platform.tools.inference_sweep import BatchResult

Series = dict[str, list[float | None]]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def comparison_panels(ok: Sequence[BatchResult]) -> list[tuple[str, Series]]:
    """The six panels of batch_size_comparison.png: (title, {series: values per size})."""

    def col(get: Callable[[BatchResult], float | None]) -> list[float | None]:
        return [get(r) for r in ok]

    tokens = any(r.tokens_per_second for r in ok)
    accuracy = any(r.accuracy is not None for r in ok)
    if accuracy:
        last: tuple[str, Series] = ("accuracy", {"accuracy": col(lambda r: r.accuracy)})
    elif tokens:
        last = ("tokens / s", {"tokens/s": col(lambda r: r.tokens_per_second)})
    else:
        last = ("latency CV (std / mean)", {"CV": col(lambda r: r.cv)})
    gpu = any(r.gpu_peak_mib is not None for r in ok)
    memory: Series = {"CPU RSS": col(lambda r: r.cpu_rss_mib)}
    if gpu:
        memory["GPU allocated"] = col(lambda r: r.gpu_allocated_mib)
        memory["GPU peak"] = col(lambda r: r.gpu_peak_mib)
    return [
        (
            "latency per batch (ms)",
            {
                "mean": col(lambda r: r.latency_ms["mean"]),
                "p95": col(lambda r: r.latency_ms["p95"]),
            },
        ),
        (
            "time per sample (ms)",
            {
                "mean": col(lambda r: r.per_sample_ms["mean"]),
                "p95": col(lambda r: r.per_sample_ms["p95"]),
            },
        ),
        ("throughput (samples / s)", {"samples/s": col(lambda r: r.samples_per_second)}),
        ("memory (MiB)", memory),
        (
            "memory efficiency (samples/s per GiB)",
            {"samples/s per GiB": col(lambda r: r.samples_per_second_per_gib)},
        ),
        last,
    ]


def plot_comparison(output_dir: Path, results: Sequence[BatchResult], title: str) -> Path:
    plt = _pyplot()
    ok = [r for r in results if r.status == "ok"]
    sizes = [r.batch_size for r in ok]
    figure, grid = plt.subplots(2, 3, figsize=(15, 8), dpi=100)
    for axes, (label, series) in zip(grid.flat, comparison_panels(ok), strict=True):
        for name, values in series.items():
            points = [(s, v) for s, v in zip(sizes, values, strict=True) if v is not None]
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", label=name)
        if label.startswith("latency per batch"):
            stds = [r.latency_ms["std"] for r in ok]
            means = [r.latency_ms["mean"] for r in ok]
            axes.errorbar(sizes, means, yerr=stds, fmt="none", ecolor="grey", capsize=3)
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, [str(size) for size in sizes])
        axes.minorticks_off()
        axes.set_xlabel("batch size")
        axes.set_title(label)
        axes.grid(True, alpha=0.3)
        if len(series) > 1 or label.startswith("memory ("):  # say whose memory, even alone
            axes.legend()
    figure.suptitle(f"{title}: batch-size comparison")
    figure.tight_layout()
    path = output_dir / "batch_size_comparison.png"
    figure.savefig(path)
    plt.close(figure)
    return path


def heatmap_columns(ok: Sequence[BatchResult]) -> dict[str, list[float | None]]:
    """The heatmap's raw columns (metrics present for at least one batch size)."""
    columns: dict[str, list[float | None]] = {
        "latency ms": [r.latency_ms["mean"] for r in ok],
        "ms / sample": [r.per_sample_ms["mean"] for r in ok],
        "samples/s": [r.samples_per_second for r in ok],
        "tokens/s": [r.tokens_per_second for r in ok],
        "CPU RSS MiB": [r.cpu_rss_mib for r in ok],
        "GPU peak MiB": [r.gpu_peak_mib for r in ok],
        "samples/s/GiB": [r.samples_per_second_per_gib for r in ok],
        "GPU util %": [r.gpu_utilization_mean_pct for r in ok],
        "accuracy": [r.accuracy for r in ok],
        "CV": [r.cv for r in ok],
    }
    return {k: v for k, v in columns.items() if any(x is not None for x in v)}


def normalise(values: list[float | None]) -> list[float]:
    """Min-max scaling to [0, 1]; a constant column is 0.5, a missing cell NaN."""
    present = [v for v in values if v is not None]
    low, high = min(present), max(present)
    return [
        float("nan") if v is None else (0.5 if high == low else (v - low) / (high - low))
        for v in values
    ]


def plot_heatmap(output_dir: Path, results: Sequence[BatchResult], title: str) -> Path:
    plt = _pyplot()
    ok = [r for r in results if r.status == "ok"]
    columns = heatmap_columns(ok)
    matrix = [list(row) for row in zip(*(normalise(v) for v in columns.values()), strict=True)]
    figure, axes = plt.subplots(figsize=(1.4 * len(columns) + 2, 0.6 * len(ok) + 2), dpi=100)
    image = axes.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(columns)), list(columns), rotation=30, ha="right")
    axes.set_yticks(range(len(ok)), [f"batch {r.batch_size}" for r in ok])
    for j, values in enumerate(columns.values()):
        for i, value in enumerate(values):
            if value is not None:
                axes.text(j, i, f"{value:.3g}", ha="center", va="center", color="white")
    figure.colorbar(image, ax=axes, label="scaled over batch sizes (0 = lowest, 1 = highest)")
    axes.set_title(f"{title}: metrics per batch size")
    figure.tight_layout()
    path = output_dir / "metrics_heatmap.png"
    figure.savefig(path)
    plt.close(figure)
    return path
