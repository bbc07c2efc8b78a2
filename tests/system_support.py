"""System sample lines for the tests, written by the trainer side's own encoder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from training_platform.callbacks.system.sample import build_sample, encode_sample

# Recent enough for the platform's "a time this run could have" check.
T0 = time.time() - 30 * 86_400


def gpu(index: int, utilization: float = 95.0, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": index,
        "name": "NVIDIA H200",
        "utilization": utilization,
        "memory_used_gib": 100.5,
        "memory_total_gib": 139.8,
        "power_w": 610.0,
        "power_limit_w": 700.0,
        "temperature_c": 63.0,
        "throttle": [],
    }
    entry.update(fields)
    return entry


def system_line(
    timestamp: float,
    host: str = "node-a",
    step: int | None = None,
    *,
    gpus: list[dict[str, Any]] | None = None,
    cpu_percent: float = 150.0,
    memory_used_gib: float = 10.5,
) -> bytes:
    groups = {
        "cpu": {"percent": cpu_percent, "count": 8, "load1": 1.5},
        "memory": {"used_gib": memory_used_gib, "total_gib": 64.0, "percent": 16.4},
        "disk": {"used_percent": 40.0},
        "network": {"recv_mib_s": 1.25, "sent_mib_s": 0.5},
    }
    sample = build_sample(timestamp=timestamp, host=host, step=step, groups=groups, gpus=gpus)
    return encode_sample(sample)


def append_system(path: Path, *lines: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(lines))
