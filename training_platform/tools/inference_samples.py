"""`sample_sizes` and `full_dataset_metrics`: the first N samples of a dataset, run once.

For each N (capped at the dataset's size, and said so), the first N samples
run in order at one batch size (the recommended one), the last batch holding
what is left, so every sample counts once: accuracy over those N, the timed
forwards' total, samples/s and milliseconds per sample. Tokenizing happens
outside the timed region, as in the sweep. The whole dataset, run the same
way, is `full_dataset_metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from training_platform.tools.inference_target import InferenceTarget, forward


def run_first(
    target: InferenceTarget,
    requested: int,
    *,
    batch_size: int,
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """The first `requested` samples (at most the dataset) at `batch_size`, once each."""
    size = target.dataset_size or 0
    if target.batch_of is None or target.predict is None or not size:
        raise ValueError("sample sizes need a labelled dataset (--dataset or dataset.name)")
    count = min(requested, size)
    correct, tokens, elapsed = 0, 0, 0.0
    with torch.inference_mode():
        for start in range(0, count, batch_size):
            part = target.batch_of(list(range(start, min(start + batch_size, count))), device)
            _sync(device)
            began = clock()
            output = forward(target.model, part.inputs)
            _sync(device)
            elapsed += clock() - began
            predicted = target.predict(output)
            correct += sum(int(p == y) for p, y in zip(predicted, part.labels, strict=True))
            tokens += part.tokens
    return {
        "requested": requested,
        "samples": count,
        "capped": count < requested,
        "batch_size": batch_size,
        "accuracy": correct / count if count else None,
        "correct": correct,
        "total_time_s": elapsed,
        "samples_per_second": count / elapsed if elapsed > 0 else None,
        "latency_per_sample_ms": elapsed * 1000.0 / count if count else None,
        "tokens_per_second": tokens / elapsed if elapsed > 0 and tokens else None,
    }


def sample_size_metrics(
    target: InferenceTarget,
    sample_sizes: Sequence[int],
    *,
    batch_size: int,
    device: torch.device,
) -> list[dict[str, Any]]:
    """`run_first` for each requested size, smallest first."""
    return [
        run_first(target, n, batch_size=batch_size, device=device) for n in sorted(sample_sizes)
    ]


def no_dataset_metrics(accuracy: float | None) -> dict[str, Any]:
    """`full_dataset_metrics` of synthetic inputs: only an --accuracy hook's figure."""
    return {
        "samples": None,
        "accuracy": accuracy,
        "note": "synthetic inputs: no dataset (accuracy is the --accuracy hook's, if given)",
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
