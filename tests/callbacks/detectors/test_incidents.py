"""One fault, one incident: conditions that keep coming back, hysteresis, extents.

The demo's KL blow-up used to raise a hundred alerts: gradient spikes every
30-100 steps once the policy had blown up, an entropy hovering around its
alarm line. These streams reproduce each shape on synthetic records.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.callbacks.helpers import healthy_record
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.findings import incident_quiet
from training_platform.callbacks.detectors.monitor import AnomalyMonitor

FAULT = 200


def alerts(monitor: AnomalyMonitor, records: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(r["step"], a["type"]) for r in records for a in monitor.check(r)]


@pytest.mark.parametrize(
    ("opened", "last", "quiet"),
    [
        (100, 100, 50),  # a one-off: the cooldown
        (100, 110, 50),  # short: still the cooldown
        (100, 160, 120),  # lasted 60 steps: twice that
        (100, 2000, 500),  # capped
    ],
)
def test_the_quiet_an_incident_needs_to_end_grows_with_its_age(
    opened: int, last: int, quiet: int
) -> None:
    assert incident_quiet(opened, last, cooldown=50, longest=500) == quiet


def test_a_cooldown_of_zero_makes_every_finding_an_alert() -> None:
    assert incident_quiet(100, 400, cooldown=0, longest=500) == 0


def test_gradient_spikes_recurring_after_a_fault_are_one_incident() -> None:
    # Every 25-70 steps, 40x the median, for 1,000 steps: the rolling median
    # forgets each spike long before the next one.
    gaps = [25, 40, 70, 30, 55, 45, 60, 35, 65, 50, 40, 70, 30, 60, 45, 55, 35, 65, 50, 40]
    spikes, step = set(), FAULT
    for gap in gaps:
        spikes.add(step)
        step += gap
    records = []
    for step in range(FAULT + 1100):
        record = healthy_record(step)
        if step in spikes:
            record["gradient"] = {"actor_norm": 40.0}
        records.append(record)

    found = alerts(AnomalyMonitor(), records)

    assert found == [(FAULT, "gradient_explosion")]


def test_a_spike_long_after_an_incident_ended_is_a_new_one() -> None:
    records = []
    for step in range(1000):
        record = healthy_record(step)
        if step in (FAULT, FAULT + 400):
            record["gradient"] = {"actor_norm": 40.0}
        records.append(record)
    assert alerts(AnomalyMonitor(), records) == [
        (FAULT, "gradient_explosion"),
        (FAULT + 400, "gradient_explosion"),
    ]


def entropy_stream(levels: dict[range, float], steps: int) -> list[dict[str, Any]]:
    """Healthy records (entropy ~1.2) with the entropy set to `level` over each range."""
    records = []
    for step in range(steps):
        record = healthy_record(step)
        for span, level in levels.items():
            if step in span:
                record["extra"]["actor/entropy"] = level
        records.append(record)
    return records


def test_an_entropy_hovering_around_its_alarm_line_after_a_collapse_is_one_incident() -> None:
    # Early level 1.2, alarm line 0.12 (90% down), recovered above 0.6.
    # After the collapse it wanders between 0.05 and 0.4, for 600 steps,
    # with 100-step stretches above the alarm line: not recovered.
    levels = {range(FAULT, FAULT + 10): 0.05}
    for start in range(FAULT + 10, FAULT + 600, 150):
        levels[range(start, start + 100)] = 0.4
        levels[range(start + 100, start + 150)] = 0.1
    found = alerts(AnomalyMonitor(), entropy_stream(levels, FAULT + 600))
    assert found == [(FAULT, "entropy_collapse")]


def test_an_entropy_that_recovers_ends_its_incident_and_a_new_collapse_alerts_again() -> None:
    levels = {range(FAULT, FAULT + 10): 0.05, range(FAULT + 200, FAULT + 210): 0.05}
    # Between the two: back at its healthy 1.2.
    found = alerts(AnomalyMonitor(), entropy_stream(levels, FAULT + 300))
    assert found == [(FAULT, "entropy_collapse"), (FAULT + 200, "entropy_collapse")]


def test_a_recovered_entropy_resting_just_above_the_alarm_line_raises_nothing_new() -> None:
    # Recovered (1.2 for 200 steps), then 0.3: below the recovery level but
    # above the alarm line, with no incident open: healthy, nothing said.
    levels = {range(FAULT, FAULT + 10): 0.05, range(FAULT + 300, FAULT + 400): 0.3}
    found = alerts(AnomalyMonitor(), entropy_stream(levels, FAULT + 400))
    assert found == [(FAULT, "entropy_collapse")]


def test_extents_say_how_far_each_alert_reaches() -> None:
    monitor = AnomalyMonitor()
    records = []
    for step in range(FAULT + 100):
        record = healthy_record(step)
        if FAULT <= step < FAULT + 60:
            record["kl"] = {"mean": 3.0}  # above the hard threshold, every step
        records.append(record)
    assert alerts(monitor, records) == [(FAULT, "kl_explosion")]
    assert ("kl_explosion", FAULT, FAULT + 59) in monitor.extents()
    assert monitor.extents(since=FAULT + 60) == []  # nothing held from there on


def test_an_escalation_moves_the_extent_to_its_own_alert() -> None:
    config = AnomalyConfig()
    monitor = AnomalyMonitor(config)
    records = []
    for step in range(FAULT + 50):
        record = healthy_record(step)
        if FAULT <= step < FAULT + 10:
            record["kl"] = {"mean": 0.8}  # a spike over the median: a warning
        elif FAULT + 10 <= step < FAULT + 30:
            record["kl"] = {"mean": 3.0}  # over the threshold: critical
        records.append(record)
    found = [(r["step"], a["severity"]) for r in records for a in monitor.check(r)]
    assert found == [(FAULT, "warning"), (FAULT + 10, "critical")]
    assert ("kl_explosion", FAULT + 10, FAULT + 29) in monitor.extents()
