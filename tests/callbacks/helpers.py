"""Helpers shared by the trainer-side tests (not fixtures: no conftest needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training_platform.callbacks.wire.lines import decode_line

SAMPLES = Path(__file__).parent / "samples"


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every line of a metrics file, decoded and validated by the wire parser."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), "the last line must be complete"
    return [decode_line(line) for line in raw.split(b"\n")[:-1]]


def read_status(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


def healthy_record(step: int, **groups: dict[str, float]) -> dict[str, Any]:
    """A plausible record of a healthy RL step; `groups` replace whole groups."""
    wiggle = 1.0 + 0.05 * ((step * 7919) % 11 - 5) / 5  # deterministic noise, +-5%
    record: dict[str, Any] = {
        "step": step,
        "timestamp": 1_700_000_000.0 + step,
        "loss": {"actor_loss": 0.1 * wiggle, "total_loss": 2.0 / (1 + step / 100) * wiggle},
        "reward": {"mean": 0.5 * wiggle, "std": 0.1, "max": 0.9, "min": 0.1},
        "kl": {"mean": 0.05 * wiggle, "max": 0.08},
        "gradient": {"actor_norm": 1.0 * wiggle},
        "extra": {"actor/entropy": 1.2 * wiggle, "response_length/mean": 300.0 * wiggle},
    }
    record.update(groups)
    return record
