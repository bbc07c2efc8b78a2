"""A real server (uvicorn in a thread) over the parametrised database, with runs in it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer, serve_in_thread
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.settings import Settings


def reward(step: int, lr: float) -> float:
    return 1.0 - math.exp(-lr * step)


def write_run(metrics_dir: Path, job_id: str, steps: int, lr: float) -> None:
    """A run whose reward climbs at `lr`; a NaN loss at step 3; samples at step 2."""
    with (metrics_dir / f"{job_id}_metrics.jsonl").open("wb") as handle:
        for step in range(steps):
            loss = math.nan if step == 3 else 1.0 / (step + 1)
            groups: dict[str, Any] = {
                "loss": {"actor_loss": loss},
                "reward": {"mean": reward(step, lr)},
                "extra": {"lr": lr},
            }
            handle.write(encode_record(build_record(step, groups, timestamp=100.0 + step)))
    with (metrics_dir / f"{job_id}_samples.jsonl").open("wb") as handle:
        for index in range(3):
            sample = build_sample(2, index, "2+2?", "4" * index, reward=index / 2, extra={"k": 1})
            handle.write(encode_record(sample))


@pytest.fixture
def server(settings: Settings, metrics_dir: Path) -> Iterator[LiveServer]:
    """Two runs, `fast` (tagged `sweep`) and `slow`, synced, served for real."""
    write_run(metrics_dir, "fast", 300, 0.05)
    write_run(metrics_dir, "slow", 300, 0.01)
    with serve_in_thread(settings, metrics_dir) as live:
        for job_id in ("fast", "slow"):
            live.sync(job_id)
        patched = httpx.patch(f"{live.url}/api/jobs/fast", json={"tags": ["sweep"]}, timeout=10)
        patched.raise_for_status()
        yield live
