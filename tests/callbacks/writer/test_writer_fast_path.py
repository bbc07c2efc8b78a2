"""The writer's shortcuts for a step its training thread saw as plain finite numbers.

`OpenStep.finite` and `OpenStep.ints` let the writer build the record without
a type scan and encode it without looking for NaN/Inf; the flat builder is
found through the last layout before the table. Each must write the very
line the general path writes (the same bytes: groups, fields, order).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.lines import encode_record, parse_json_line
from training_platform.callbacks.wire.records import (
    build_record,
    build_step_record,
    flat_record,
    normalize_record,
)
from training_platform.callbacks.writer.step_metrics import MetricsMerger, OpenStep

KEYS = (
    "actor/pg_loss", "critic/vf_loss", "critic/score/mean", "actor/kl_loss", "actor/grad_norm",
    "actor/entropy", "response_length/mean", "perf/throughput", "timing_s/gen", "custom/x",
    "loss", "policy_loss", "timing/gen", "epoch",
)  # fmt: skip


def general_line(step: int, metrics: dict[str, Any], timestamp: float) -> bytes:
    """The line the key-by-key builder and `encode_record` write."""
    record = normalize_record({"step": step, "timestamp": timestamp, **metrics})
    return encode_record(record)


def test_the_training_thread_tells_floats_from_ints() -> None:
    merger = MetricsMerger("job")
    floats = OpenStep(1)
    merger.merge(floats, {"a": 1.0, "b": 2.5})
    assert (floats.finite, floats.ints) == (True, False)
    ints = OpenStep(2)
    merger.merge(ints, {"a": 1.0})
    merger.merge(ints, {"b": 3})  # a second merge with an int
    assert (ints.finite, ints.ints) == (True, True)
    wide = OpenStep(3)
    merger.merge(wide, {"a": 2**70, "b": 1.0})  # finite, beyond 64 bits: checked by the writer
    assert (wide.finite, wide.ints) == (True, True)
    record = build_step_record(3, wide.metrics, 5.0, (), wide.ints)
    assert record == build_record(3, {"a": 2**70, "b": 1.0}, timestamp=5.0)
    assert type(record["extra"]["a"]) is float


@pytest.mark.parametrize("seed", range(20))
def test_the_known_types_path_builds_what_the_general_path_builds(seed: int) -> None:
    rng = random.Random(seed)
    for step in range(60):
        # Layouts that repeat, change, come back and change order (the last-layout cache).
        keys = list(rng.sample(KEYS, rng.randint(1, len(KEYS))))
        if rng.random() < 0.3:
            rng.shuffle(keys)
        metrics: dict[str, Any] = {
            key: rng.choice([rng.gauss(0, 1), rng.randint(-5, 5), 2**70, -(2**63), 1e300])
            for key in keys
        }
        ints = any(type(v) is int for v in metrics.values())
        for told in (ints, None):
            record = build_step_record(step, metrics, 5.0, (), told)
            assert encode_record(record) == general_line(step, metrics, 5.0)
            assert repr(record) == repr(build_record(step, metrics, timestamp=5.0))


def test_the_last_layout_is_not_taken_for_another_order() -> None:
    first = {"actor/pg_loss": 1.0, "loss": 2.0, "x": 3.0}
    swapped = {"loss": 2.0, "actor/pg_loss": 1.0, "x": 3.0}
    for metrics in (first, swapped, first, {"x": 3.0}, swapped):
        built = flat_record(1, 2.0, metrics, False)
        assert built is not None
        assert repr(built) == repr(normalize_record({"step": 1, "timestamp": 2.0, **metrics}))
    assert flat_record(1, 2.0, {"a": "text"}) is None  # the general path's case
    assert flat_record(1, 2.0, {1: 1.0}, False) is None  # keys that are not strings


def test_the_callback_writes_the_general_paths_lines(tmp_path: Path) -> None:
    """Plain steps (floats, ints, ints beyond 64 bits), a NaN step, a step with
    a string spelling and late metrics for a written step: every line as the
    general path writes it."""
    rng = random.Random(7)
    times = iter(float(t) for t in range(1_000, 10_000))
    callback = PlatformCallback("fast", tmp_path, clock=lambda: next(times))
    callback.on_train_begin()
    written: list[tuple[int, dict[str, Any]]] = []
    for step in range(40):
        metrics: dict[str, Any] = {key: 0.5 + rng.random() for key in KEYS[:9]}
        if step % 5 == 1:
            metrics["tokens"] = rng.randint(0, 10**6)
        if step % 7 == 2:
            metrics["huge"] = 2**70
        if step == 11:
            metrics["actor/pg_loss"] = math.nan
        if step == 13:
            metrics["critic/vf_loss"] = "Infinity"
        callback.on_step_end(step, metrics)
        written.append((step, metrics))
        # Late metrics rewrite the step with the union: plain ones after a NaN or
        # a string spelling (the union is not plain), an infinity after plain ones.
        late = {11: {"eval_loss": 2.0}, 13: {"eval_loss": 3.0}, 20: {"loss": math.inf}}
        if step in late:
            callback.on_log(step, late[step])
            written.append((step, {**metrics, **late[step]}))
    callback.on_train_end()
    lines = (tmp_path / "fast_metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == len(written)
    for line, (step, metrics) in zip(lines, written, strict=True):
        stored = parse_json_line(line[:-1])
        expected = normalize_record({"step": step, "timestamp": stored["timestamp"], **metrics})
        if "anomalies" in stored:  # the detectors' findings (random values: some fire)
            expected["anomalies"] = stored["anomalies"]
        assert ("nan_inf" in {a["type"] for a in stored.get("anomalies", ())}) == (step == 11)
        assert encode_record(expected) == line
