"""The stage-breakdown figure (PNG): stages stacked per step, and each stage's share.

matplotlib is imported here, when a figure is drawn (the `tools` extra);
without it `draw_stage_figure` raises ImportError and the caller says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_BARS = 400
COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
          "#ca8a04", "#db2777", "#4b5563", "#65a30d", "#7c3aed", "#0d9488"]  # fmt: skip


def _bucketed(
    steps: list[tuple[int, dict[str, float]]], names: list[str]
) -> tuple[list[float], dict[str, list[float]]]:
    """At most MAX_BARS bars: consecutive steps averaged together."""
    size = max(1, -(-len(steps) // MAX_BARS))
    xs: list[float] = []
    series: dict[str, list[float]] = {name: [] for name in names}
    for start in range(0, len(steps), size):
        chunk = steps[start : start + size]
        xs.append(chunk[0][0])
        for name in names:
            series[name].append(sum(times.get(name, 0.0) for _, times in chunk) / len(chunk))
    return xs, series


def draw_stage_figure(
    report: dict[str, Any], steps: list[tuple[int, dict[str, float]]], path: Path
) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    rows = [row for row in (report.get("breakdown") or {}).get("stages") or [] if not row["depth"]]
    rows.sort(key=lambda row: row["total"], reverse=True)
    names = [row["stage"] for row in rows]
    if not names and steps:
        names = sorted({name for _, times in steps for name in times})
    colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2.4, 1]}
    )
    title = report.get("job_id") or Path(str(report.get("profile"))).name
    figure.suptitle(f"Stage breakdown · {title}")
    if steps and names:
        xs, series = _bucketed(steps, names)
        bottom = [0.0] * len(xs)
        width = (xs[1] - xs[0]) * 0.9 if len(xs) > 1 else 0.8
        for name in names:
            values = [v * 1000 for v in series[name]]
            left.bar(
                xs, values, width=width, bottom=bottom, color=colors[name], label=name, linewidth=0
            )
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        left.set_xlabel("step")
        left.set_ylabel("time per step (ms)")
        left.set_title("stages stacked per step")
        left.legend(loc="upper right", fontsize="small")
    else:
        left.text(
            0.5,
            0.5,
            "no per-step stage times\n(no metrics file next to the profile)",
            ha="center",
            va="center",
            transform=left.transAxes,
        )
        left.set_axis_off()
    if rows:
        shares = [(row["share"] or 0.0) * 100 for row in rows]
        labels = list(names)
        unaccounted = (report.get("breakdown") or {}).get("unaccounted_share")
        if unaccounted:
            shares.append(unaccounted * 100)
            labels.append("(in no stage)")
        positions = list(range(len(labels)))[::-1]
        right.barh(positions, shares, color=[colors.get(n, "#9ca3af") for n in labels])
        right.set_yticks(positions, labels)
        for y, share in zip(positions, shares, strict=True):
            right.text(share, y, f" {share:.1f} %", va="center", fontsize="small")
        right.set_xlim(0, max(max(shares) * 1.25, 1))
        right.set_xlabel("share of the step (%)")
        right.set_title("share of each stage")
    else:
        right.set_axis_off()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
