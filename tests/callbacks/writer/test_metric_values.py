"""Which values a step's record keeps (issue 11 §8): one number, or nothing."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.callbacks.helpers import read_records
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.records import build_record, normalize_record


def write_steps(tmp_path: Path, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    callback = PlatformCallback("job", tmp_path)
    callback.on_train_begin()
    for step, metrics in enumerate(steps):
        callback.on_step_end(step, metrics)
    callback.on_train_end()
    return read_records(tmp_path / "job_metrics.jsonl")


def test_values_with_one_sensible_number_are_reduced_to_it(tmp_path: Path) -> None:
    metrics = {
        "loss": torch.tensor([0.25]),  # a one-element 1-d tensor
        "actor/grad_norm": np.array([[1.5]]),  # a one-element 2-d array
        "reward": np.float32(0.5),
        "kl": torch.tensor(0.125),  # 0-d
        "actor/entropy": [0.75],  # a one-element list
        "response_length/mean": np.int64(300),
        "is_warmup": True,  # bools stay bools (as before)
    }
    [record] = write_steps(tmp_path, [metrics])
    assert record["loss"] == {"total_loss": 0.25}
    assert record["gradient"] == {"actor_norm": 1.5}
    assert record["reward"] == {"mean": 0.5}
    assert record["kl"] == {"mean": 0.125}
    assert record["extra"] == {
        "actor/entropy": 0.75,
        "response_length/mean": 300,
        "is_warmup": True,
    }


def test_values_without_one_number_are_dropped_with_one_warning_per_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def step(index: int) -> dict[str, Any]:
        return {
            "loss": 1.0 / (index + 1),
            "actor/entropy": torch.tensor([0.5, 0.6]),  # several elements: no one number
            "run_name": "grpo-7b",  # a string is not a metric
            "timing": {"gen": 1.0, "note": "slow host"},
            "kl": "NaN",  # ... except the wire format's spellings of non-finite numbers
        }

    with caplog.at_level(logging.WARNING, logger="training_platform.callbacks"):
        records = write_steps(tmp_path, [step(index) for index in range(3)])
    assert len(records) == 3
    for record in records:
        assert "extra" not in record  # nothing stored as its str()
        assert record["timing"] == {"gen": 1.0}
        assert math.isnan(record["kl"]["mean"])
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 3, dropped  # one per key, not one per step
    assert any("'actor/entropy'" in m and "shape (2,)" in m for m in dropped)
    assert any("'run_name'" in m for m in dropped)
    assert any("'timing.note'" in m for m in dropped)


FLAT_CASES = [
    {"actor/pg_loss": 1.0, "loss": 2.0, "timing_s/gen": 3.0, "timing_s/step": 9.0},
    {"loss": 2.0, "actor/pg_loss": 1.0, "policy_loss": 0.5, "perf/time_per_step": 4.0},
    {"reward": 1, "critic/score/mean": 2.0, "x": float("nan"), "y": math.inf},
    {"big": 2**70, "small": -(2**70), "zero": 0, "timing/gen": 1.0, "timing_s/gen": 2.0},
    {},
]


@pytest.mark.parametrize("metrics", FLAT_CASES)
def test_the_fast_path_for_flat_numbers_builds_what_the_general_path_builds(
    metrics: dict[str, Any],
) -> None:
    fast = build_record(3, metrics, timestamp=5.0)
    general = normalize_record({"step": 3, "timestamp": 5.0, **metrics})  # the key-by-key builder
    assert repr(fast) == repr(general)  # same groups, fields, order (and NaN where NaN was)
    assert build_record(3, metrics, timestamp=5.0) == fast  # the cached layout gives the same
