"""The batch size `profile-inference` recommends, and why, from robust figures.

Throughputs are the median-latency ones of `inference_sweep.summarise`, and
the noise that makes two of them a tie is the IQR-based spread
(`BatchResult.robust_cv`): one slow run (a warm-up the machine paid late, a
hiccup of a busy host) moves neither, so it cannot decide the recommendation
or blow up its margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training_platform.tools.inference_sweep import BatchResult

# The standard error of a median is about sqrt(pi / 2) times that of a mean.
_MEDIAN_SE = math.sqrt(math.pi / 2.0)


def best_batch_size(
    results: Sequence[BatchResult], max_latency_ms: float | None = None
) -> tuple[BatchResult | None, str]:
    """The highest-throughput batch size (within a p95 latency budget when given), and why.

    The reason gives the margin over the runner-up. Throughputs within the
    measurement noise of the best (two standard errors of their difference)
    are a tie, and the smallest tied batch size is recommended: same
    throughput, lower latency and memory.
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
    if best is top and others:
        runner = others[0]
        reason += f"; {margin_text(best, runner)}, batch size {runner.batch_size} "
        reason += f"({runner.samples_per_second:.1f} samples/s)"
    if tied:
        sizes = ", ".join(
            str(r.batch_size) for r in sorted([top, *tied], key=lambda r: r.batch_size)
        )
        # A smaller tied size is chosen over a faster-measured one: name that
        # one rather than print a margin "over" it that is negative.
        fastest = (
            ""
            if best is top
            else f" (the fastest, batch size {top.batch_size}: "
            f"{top.samples_per_second:.1f} samples/s)"
        )
        reason += (
            f"; sizes {sizes} are within measurement noise{fastest}, so the smallest is chosen"
        )
    largest = max(r.batch_size for r in usable)
    if best.batch_size < largest and not tied:
        # Throughput that falls with larger batches means the device is saturated.
        reason += f"; larger batches up to {largest} gave no more throughput"
    elif best.batch_size == largest and max_latency_ms is None and _all_ok(results):
        reason += "; the largest size tried: larger ones may do better still"
    return best, reason


def margin_text(best: BatchResult, runner: BatchResult) -> str:
    """``+12.5% over the runner-up``, or ``3.4x the throughput of the runner-up`` past double.

    A percentage in the thousands reads as a measurement error even when it
    is real (a GPU at batch 32 against batch 1): a ratio says it plainly.
    """
    ratio = (best.samples_per_second or 0.0) / (runner.samples_per_second or 1.0)
    if ratio >= 2.0:
        return f"{ratio:.1f}x the throughput of the runner-up"
    return f"{ratio - 1.0:+.1%} over the runner-up"


def _all_ok(results: Sequence[BatchResult]) -> bool:
    return all(r.status == "ok" for r in results)


def _within_noise(a: BatchResult, b: BatchResult) -> bool:
    """Whether two median throughputs differ by less than two standard errors of the difference."""
    if not (a.runs and b.runs and a.samples_per_second and b.samples_per_second):
        return False
    if a.robust_cv is None or b.robust_cv is None or a.robust_cv + b.robust_cv == 0.0:
        return False
    error = _MEDIAN_SE * math.sqrt(a.robust_cv**2 / a.runs + b.robust_cv**2 / b.runs)
    return abs(a.samples_per_second / b.samples_per_second - 1.0) < 2.0 * error
