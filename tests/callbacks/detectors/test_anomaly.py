from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from tests.callbacks.helpers import healthy_record
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor, is_alert

ONSET = 300
Fault = Callable[[int, dict[str, Any]], None]


def run_stream(
    fault: Fault | None, steps: int = 600, config: AnomalyConfig | None = None
) -> list[tuple[int, dict[str, str]]]:
    """Feed `steps` healthy records, with `fault` applied from ONSET on."""
    monitor = AnomalyMonitor(config)
    found: list[tuple[int, dict[str, str]]] = []
    for step in range(steps):
        record = healthy_record(step)
        if fault is not None and step >= ONSET:
            fault(step, record)
        found.extend((step, anomaly) for anomaly in monitor.check(record))
    return found


def test_a_long_healthy_stream_raises_nothing() -> None:
    assert run_stream(None, steps=3000) == []


def nan_loss(step: int, record: dict[str, Any]) -> None:
    record["loss"]["total_loss"] = math.nan


def inf_in_extra(step: int, record: dict[str, Any]) -> None:
    record["extra"]["critic/vf_loss"] = math.inf


def kl_over_threshold(step: int, record: dict[str, Any]) -> None:
    record["kl"]["mean"] = 3.2


def kl_spike_below_threshold(step: int, record: dict[str, Any]) -> None:
    record["kl"]["mean"] = 0.6  # 12x the healthy 0.05, still under kl_threshold=1.0


def flat_loss(step: int, record: dict[str, Any]) -> None:
    record["loss"]["total_loss"] = 1.0  # twice the last healthy value, then flat


def loss_spike(step: int, record: dict[str, Any]) -> None:
    if step == ONSET:
        record["loss"]["total_loss"] = 400.0


def grad_spike(step: int, record: dict[str, Any]) -> None:
    record["gradient"]["actor_norm"] = 50.0


def grad_overflow(step: int, record: dict[str, Any]) -> None:
    record["gradient"]["actor_norm"] = math.inf


def entropy_collapse(step: int, record: dict[str, Any]) -> None:
    record["extra"]["actor/entropy"] = 0.06  # 95% below the early level of ~1.2


def reward_hacking(step: int, record: dict[str, Any]) -> None:
    ramp = min(1.0, (step - ONSET) / 20)
    record["reward"]["mean"] = 0.5 + 0.3 * ramp
    record["kl"]["mean"] = 0.05 + 0.4 * ramp
    record["extra"]["response_length/mean"] = 300.0 * (1 + 1.5 * ramp)


@pytest.mark.parametrize(
    ("fault", "kind", "severity", "within"),
    [
        (nan_loss, "nan_inf", "critical", 0),
        (inf_in_extra, "nan_inf", "critical", 0),
        (kl_over_threshold, "kl_explosion", "critical", 0),
        (kl_spike_below_threshold, "kl_explosion", "warning", 0),
        (flat_loss, "loss_plateau", "warning", 50),
        (loss_spike, "loss_spike", "critical", 0),
        (grad_spike, "gradient_explosion", "warning", 0),
        (grad_overflow, "gradient_explosion", "critical", 0),
        (entropy_collapse, "entropy_collapse", "warning", 0),
        (reward_hacking, "reward_hacking", "warning", 20),
    ],
)
def test_each_detector_fires_once_on_its_fault_soon_after_onset(
    fault: Fault, kind: str, severity: str, within: int
) -> None:
    found = run_stream(fault)
    mine = [(step, anomaly) for step, anomaly in found if anomaly["type"] == kind]
    # One incident, one alert: the fault persists (or is a single spike) to the end.
    assert len(mine) == 1, found
    step, anomaly = mine[0]
    assert anomaly["severity"] == severity
    assert ONSET <= step <= ONSET + within
    assert anomaly["message"]
    # Nothing else fires, except nan_inf alongside an infinite grad norm.
    assert {a["type"] for _, a in found} <= {kind, "nan_inf"}


def test_a_falling_loss_that_stops_is_one_plateau_within_loss_patience_steps() -> None:
    monitor = AnomalyMonitor(AnomalyConfig(loss_patience=30, loss_min_delta=0.01))
    fired = []
    for step in range(300):
        # Falls until step 99, then wobbles by less than min_delta for good.
        loss = 2.0 - 0.015 * step if step <= 99 else 0.52 - 0.004 * (step % 2)
        fired += [step for a in monitor.check({"step": step, "loss": {"total_loss": loss}})]
    assert len(fired) == 1 and 100 < fired[0] <= 99 + 30


def test_a_loss_that_freezes_is_a_plateau_after_exactly_loss_patience_steps() -> None:
    # A GRPO policy loss: zero-centred noise, never "improving"; then it freezes.
    monitor = AnomalyMonitor(AnomalyConfig(loss_patience=30))
    fired = []
    for step in range(300):
        loss = 0.02 * math.sin(step * 2.4) if step < 150 else 0.0123
        fired += [(step, a) for a in monitor.check({"step": step, "loss": {"actor_loss": loss}})]
    assert [step for step, _ in fired] == [150 + 30]
    assert fired[0][1]["message"].startswith("loss.actor_loss has stayed within 0.0001 of 0.0123")


def test_an_incident_that_escalates_is_reported_again_as_critical() -> None:
    def rising_kl(step: int, record: dict[str, Any]) -> None:
        record["kl"]["mean"] = 0.6 if step < ONSET + 5 else 2.0

    found = [(step, a["severity"]) for step, a in run_stream(rising_kl)]
    assert found == [(ONSET, "warning"), (ONSET + 5, "critical")]


def test_a_condition_flapping_within_the_cooldown_is_one_incident() -> None:
    def flapping(step: int, record: dict[str, Any]) -> None:
        if step % 3 == 0:
            record["kl"]["mean"] = 3.0

    kinds = [a["type"] for _, a in run_stream(flapping)]
    assert kinds == ["kl_explosion"]


def test_a_second_incident_after_the_cooldown_is_a_second_alert() -> None:
    def two_bursts(step: int, record: dict[str, Any]) -> None:
        if step < ONSET + 5 or ONSET + 100 <= step < ONSET + 105:
            record["kl"]["mean"] = 3.0

    steps = [step for step, _ in run_stream(two_bursts)]
    assert steps == [ONSET, ONSET + 100]


def test_detectors_tolerate_missing_groups_none_strings_and_junk() -> None:
    monitor = AnomalyMonitor()
    odd_records: list[dict[str, Any]] = [
        {"step": 0, "timestamp": 1.0},
        {"step": 1},
        {"step": 2, "loss": None, "kl": {"mean": None}, "extra": {"actor/entropy": "high"}},
        {"step": 3, "gradient": {"actor_norm": [1, 2]}, "reward": "x", "anomalies": [1]},
        {"step": "4", "kl": {"mean": 0.01}, "extra": {"note": "text", "list": [1.0]}},
        {"step": None, "loss": {"total_loss": True}},
    ]
    for record in odd_records:
        assert monitor.check(record) == []


def test_the_api_spelling_of_non_finite_values_is_understood() -> None:
    monitor = AnomalyMonitor()
    found = monitor.check({"step": 0, "loss": {"total_loss": "NaN"}})
    assert [a["type"] for a in found] == ["nan_inf"]


def test_disabled_detectors_do_not_run() -> None:
    config = AnomalyConfig(disabled=frozenset({"loss_plateau", "nan_inf"}))
    assert run_stream(flat_loss, config=config) == []
    assert run_stream(nan_loss, config=config) == []


def test_entropy_below_the_absolute_floor_is_a_collapse_even_without_history() -> None:
    monitor = AnomalyMonitor()
    found = monitor.check({"step": 0, "extra": {"policy/entropy_avg": 0.001}})
    assert [a["type"] for a in found] == ["entropy_collapse"]


def test_kl_threshold_is_configurable() -> None:
    def kl_two(step: int, record: dict[str, Any]) -> None:
        record["kl"]["mean"] = 2.0

    relaxed = AnomalyConfig(kl_threshold=5.0, kl_spike_factor=1000.0)
    assert run_stream(kl_two, config=relaxed) == []


def test_reset_forgets_history() -> None:
    monitor = AnomalyMonitor(AnomalyConfig(loss_patience=3))
    for step in range(5):
        monitor.check({"step": step, "loss": {"total_loss": 1.0}})
    monitor.reset()
    assert monitor.check({"step": 0, "loss": {"total_loss": 1.0}}) == []


def test_a_detector_bug_costs_one_log_line_not_the_check(caplog: pytest.LogCaptureFixture) -> None:
    monitor = AnomalyMonitor()

    def broken(step: int, record: Any) -> None:
        raise RuntimeError("bug")

    monitor.detectors[1].evaluate = broken  # type: ignore[method-assign]
    for step in range(3):  # a NaN KL: the KL detector's own `evaluate` judges it
        found = monitor.check(
            {"step": step, "loss": {"total_loss": math.nan}, "kl": {"mean": math.nan}}
        )
        assert [a["type"] for a in found] == (["nan_inf"] if step == 0 else [])
    assert caplog.text.count("RuntimeError: bug") == 1


def test_is_alert_compares_severities() -> None:
    assert is_alert({"severity": "critical"})
    assert is_alert({"severity": "warning"})
    assert not is_alert({"severity": "info"})
    assert not is_alert({"severity": "warning"}, at_least="critical")
