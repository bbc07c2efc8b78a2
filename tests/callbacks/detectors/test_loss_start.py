"""`loss_not_decreasing`: a loss flat or rising from its start, on the trainer side."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.helpers import read_records
from tests.callbacks.loss_streams import HEALTHY, Stream, metrics_stream
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.loss_start import LossNotDecreasingDetector
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.wire.records import build_record

CONFIG = AnomalyConfig()
# The value at which a loss is first judged, as a step of a stream from step 0:
# 10 warm-up values, a start block of 25, then 50 (`loss_patience`) more.
JUDGED = CONFIG.loss_start_judged_at - 1
Losses = Callable[[int, random.Random], dict[str, Any]]


def flagged(
    losses: Losses, steps: int = 400, seed: int = 0, config: AnomalyConfig = CONFIG
) -> list[tuple[int, str]]:
    """(step, message) of every loss_not_decreasing over a run's flat metrics."""
    monitor = AnomalyMonitor(config)
    rng = random.Random(seed)
    found = []
    for step in range(steps):
        record = build_record(step, losses(step, rng), timestamp=1.0e9 + step)
        for anomaly in monitor.check(record):
            assert anomaly["type"] == "loss_not_decreasing", anomaly
            assert anomaly["severity"] == "warning"
            found.append((step, anomaly["message"]))
    return found


def constant(step: int, rng: random.Random) -> dict[str, Any]:
    return {"loss": 2.3}  # an HF Trainer's LM loss that never moves


def noisy_flat(step: int, rng: random.Random) -> dict[str, Any]:
    return {"critic/vf_loss": 0.8 * (1 + rng.gauss(0, 0.05))}


def rising(step: int, rng: random.Random) -> dict[str, Any]:
    return {"loss": (1.0 + 0.004 * step) * (1 + rng.gauss(0, 0.03))}


def falling(step: int, rng: random.Random) -> dict[str, Any]:
    return {"loss": (1.2 + 1.8 * math.exp(-step / 150)) * (1 + rng.gauss(0, 0.03))}


def test_a_constant_loss_is_flagged_once_after_warm_up_start_and_patience() -> None:
    assert JUDGED == 84
    assert flagged(constant) == [
        (
            JUDGED,
            "loss.total_loss has not decreased in the 75 steps after its warm-up: "
            "median 2.3 over its last 25 values, 2.3 over its first 25",
        )
    ]


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_flat_value_loss_is_flagged_once_and_not_before_its_patience(seed: int) -> None:
    found = flagged(noisy_flat, seed=seed)
    assert len(found) == 1
    step, message = found[0]
    assert JUDGED <= step <= JUDGED + CONFIG.loss_patience
    assert message.startswith("loss.critic_loss has not decreased in the ")


@pytest.mark.parametrize("seed", range(3))
def test_a_rising_loss_is_flagged_at_its_first_judgement(seed: int) -> None:
    assert [step for step, _ in flagged(rising, seed=seed)] == [JUDGED]


@pytest.mark.parametrize("seed", range(3))
def test_a_falling_loss_is_never_flagged(seed: int) -> None:
    assert flagged(falling, steps=1000, seed=seed) == []


def test_a_policy_loss_has_no_direction_whatever_it_does() -> None:
    def policy(step: int, rng: random.Random) -> dict[str, Any]:
        # GRPO's zero-centred loss, and one that sits above zero and rises.
        return {"actor/pg_loss": rng.gauss(0, 0.02), "actor_loss": 0.05 + 0.001 * step}

    assert flagged(policy) == []
    monitor = AnomalyMonitor()
    for step in range(400):
        monitor.check({"step": step, "loss": {"actor_loss": 0.05 + 0.001 * step}})
    assert monitor.extents() == []


def test_the_total_loss_of_an_rl_run_has_no_direction() -> None:
    def grpo(step: int, rng: random.Random) -> dict[str, Any]:
        # TRL GRPO: `loss` is beta x KL (+ a zero-mean term): it grows with the KL.
        kl = 0.05 + 0.001 * step
        return {"loss": 0.1 * kl, "kl": kl, "reward": 1.0}

    assert flagged(grpo) == []
    # The same loss without a reward or KL is an SFT loss that rises: flagged.
    assert [step for step, _ in flagged(lambda s, r: {"loss": grpo(s, r)["loss"]})] == [JUDGED]


def test_a_loss_around_zero_has_no_level_to_stay_above() -> None:
    assert flagged(lambda step, rng: {"loss": rng.gauss(0.001, 0.02)}) == []
    assert flagged(lambda step, rng: {"loss": 0.0}) == []


def test_a_loss_that_starts_falling_ends_the_incident_and_the_rule() -> None:
    def late_start(step: int, rng: random.Random) -> dict[str, Any]:
        # Flat until step 150 (a data bug, fixed), then falls, then flat again.
        level = 2.0 if step < 150 else max(1.0, 2.0 - 0.02 * (step - 150))
        return {"loss": level * (1 + rng.gauss(0, 0.01))}

    monitor = AnomalyMonitor()
    detector = next(d for d in monitor.detectors if isinstance(d, LossNotDecreasingDetector))
    rng = random.Random(0)
    found, holding = [], []
    for step in range(600):
        found += [
            (step, a["type"]) for a in monitor.check(build_record(step, late_start(step, rng)))
        ]
        holding.append(detector.watches["total_loss"].holding is not None)
    (alerted, kind), *later = found
    assert kind == "loss_not_decreasing"
    assert JUDGED <= alerted <= JUDGED + CONFIG.loss_patience
    ended = holding.index(False, alerted)
    assert 150 < ended < 150 + CONFIG.loss_patience  # cleared once clearly below its start
    assert not any(holding[ended:])  # the rule is over for this loss ...
    assert detector.watches["total_loss"].done
    assert detector.extents() == [(alerted, ended - 1)]
    # ... and the stall after the fall is loss_plateau's.
    assert [kind for _, kind in later] == ["loss_plateau"]


def test_the_warm_up_is_not_the_start() -> None:
    def warm_up_rise(step: int, rng: random.Random) -> dict[str, Any]:
        # Rises while the learning rate warms up, then flat: not decreasing.
        return {"loss": (1.0 + 0.05 * min(step, 8)) * (1 + rng.gauss(0, 0.02))}

    def converged_early(step: int, rng: random.Random) -> dict[str, Any]:
        # Fell within its warm-up, then flat: it did decrease.
        return {"loss": (1.2 + 1.8 * math.exp(-step / 3)) * (1 + rng.gauss(0, 0.02))}

    (step, _), *more = flagged(warm_up_rise)
    assert JUDGED <= step <= JUDGED + CONFIG.loss_patience and not more
    assert flagged(converged_early) == []


def test_the_rule_follows_loss_patience_and_its_warm_up() -> None:
    config = AnomalyConfig(loss_patience=20, loss_start_warmup=5)
    # 5 warm-up values, a start block of `min_history` (10), then 20 more.
    assert config.loss_start_judged_at == 35
    assert [step for step, _ in flagged(constant, config=config)] == [34]
    disabled = AnomalyConfig(disabled=frozenset({"loss_not_decreasing"}))
    assert flagged(constant, config=disabled) == []


def test_a_record_without_the_loss_keeps_the_incident_without_a_new_alert() -> None:
    monitor = AnomalyMonitor()
    found = []
    for step in range(300):
        # HF logs its loss every few steps; the other records have none.
        losses = {"total_loss": 1.5} if step % 3 == 0 else {}
        found += [(step, a["type"]) for a in monitor.check({"step": step, "loss": losses})]
    # The 85th value is at step 252; the incident then lasts to the end.
    assert found == [(3 * JUDGED, "loss_not_decreasing")]
    assert [last for _, _, last in monitor.extents()] == [299]


@pytest.mark.parametrize("stream", HEALTHY, ids=[s.name for s in HEALTHY])
def test_no_healthy_stream_is_flagged_in_its_first_1000_steps(stream: Stream) -> None:
    for seed in range(3):
        monitor = AnomalyMonitor()
        for step, metrics in metrics_stream(stream, 1000, seed=seed):
            found = monitor.check(build_record(step, metrics, timestamp=1.0e9 + step))
            assert [a for a in found if a["type"] == "loss_not_decreasing"] == []


def test_the_callback_writes_the_alert_into_its_metrics_file(tmp_path: Path) -> None:
    callback = PlatformCallback("run", tmp_path)
    rng = random.Random(0)
    for step in range(200):
        callback.on_log(step, noisy_flat(step, rng))
        callback.commit_step()
    callback.on_train_end()
    records = read_records(tmp_path / "run_metrics.jsonl")
    found = [(r["step"], a["type"]) for r in records for a in r.get("anomalies", ())]
    assert found == [(flagged(noisy_flat)[0][0], "loss_not_decreasing")]
