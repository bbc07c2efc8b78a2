"""The loss detectors on verl-, TRL- and HF-shaped streams; re-alerting within a cooldown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.helpers import read_records, read_status
from tests.callbacks.loss_streams import (
    STREAMS,
    Fault,
    Stream,
    frozen,
    metrics_stream,
    spike,
    stalled,
)
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.integrations.verl import VerlTrackingBackend
from training_platform.callbacks.wire.records import build_record

PATIENCE = AnomalyConfig().loss_patience
FALLING = [stream for stream in STREAMS if stream.falling_key is not None]
ids = [stream.name for stream in STREAMS]


def monitored(
    stream: Stream, steps: int, fault: Fault | None = None, seed: int = 0
) -> list[tuple[int, str, str, str]]:
    """(step, type, severity, message) of every anomaly over the stream."""
    monitor = AnomalyMonitor()
    found = []
    for step, metrics in metrics_stream(stream, steps, fault, seed):
        for anomaly in monitor.check(build_record(step, metrics, timestamp=1.0e9 + step)):
            found.append((step, anomaly["type"], anomaly["severity"], anomaly["message"]))
    return found


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_a_healthy_stream_raises_nothing_in_2000_steps(stream: Stream, seed: int) -> None:
    assert monitored(stream, 2000, seed=seed) == []


@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_a_10x_spike_of_the_policy_loss_is_flagged_at_its_step_naming_the_loss(
    stream: Stream,
) -> None:
    found = monitored(stream, 1100, spike(stream.policy_key, 1000))
    assert [(step, kind, severity) for step, kind, severity, _ in found] == [
        (1000, "loss_spike", "critical")
    ]
    assert found[0][3].startswith(f"loss.{stream.policy_field} ")


@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_a_frozen_policy_loss_is_a_plateau_within_loss_patience_steps(stream: Stream) -> None:
    found = monitored(stream, 1200, frozen(stream.policy_key, 1000))
    assert [kind for _, kind, _, _ in found] == ["loss_plateau"]
    step, _, _, message = found[0]
    if stream.falling_key == stream.policy_key:  # still falling: it stopped, visibly
        assert 1000 < step <= 1000 + PATIENCE
        assert message.startswith(f"loss.{stream.policy_field} stopped falling")
    else:  # zero-centred: a frozen value is the only sign; exactly loss_patience steps on
        assert step == 1000 + PATIENCE
        assert message.startswith(f"loss.{stream.policy_field} has stayed within")


@pytest.mark.parametrize("stream", FALLING, ids=[stream.name for stream in FALLING])
def test_a_falling_loss_that_stalls_is_one_plateau_within_loss_patience_steps(
    stream: Stream,
) -> None:
    assert stream.falling_key is not None
    found = monitored(stream, 600, stalled(stream.falling_key, 150))
    assert [kind for _, kind, _, _ in found] == ["loss_plateau"]
    step, _, severity, message = found[0]
    assert 150 < step <= 150 + PATIENCE
    assert severity == "warning"
    assert message.startswith(f"loss.{stream.falling_field} stopped falling")


def test_a_loss_that_is_zero_by_construction_does_not_spike_on_float_noise() -> None:
    monitor = AnomalyMonitor()
    for step in range(200):
        tiny = 1e-9 * (-1) ** step if step != 150 else 5e-7  # 500x its noise, still ~0
        assert monitor.check({"step": step, "loss": {"total_loss": tiny}}) == []


def test_a_positive_loss_that_jumps_10x_its_level_is_a_spike() -> None:
    monitor = AnomalyMonitor()
    found = []
    for step in range(100):
        loss = 0.5 if step != 80 else 5.0
        found += [
            (step, a["message"])
            for a in monitor.check({"step": step, "loss": {"critic_loss": loss}})
            if a["type"] == "loss_spike"  # a value loss this flat is also not decreasing
        ]
    assert found == [
        (80, "loss.critic_loss 5 is 10x its typical magnitude 0.5 over the last 60 steps")
    ]


def grad_record(step: int, norm: float) -> dict[str, Any]:
    return {"step": step, "gradient": {"actor_norm": norm}}


def test_a_value_far_beyond_the_one_that_opened_a_cooldown_alerts_again() -> None:
    monitor = AnomalyMonitor()
    for step in range(50):
        assert monitor.check(grad_record(step, 0.2 + 0.01 * (step % 5))) == []
    warning = monitor.check(grad_record(50, 6.4))
    escalated = monitor.check(grad_record(51, 1309.0))
    calmer = monitor.check(grad_record(52, 40.0))  # still in the incident: no new alert

    assert [a["severity"] for a in warning] == ["warning"]
    assert [(a["type"], a["severity"]) for a in escalated] == [("gradient_explosion", "warning")]
    assert escalated[0]["message"].startswith("gradient.actor_norm 1309 is")
    assert (
        "further from normal than the alert of this incident opened at step 50"
        in (escalated[0]["message"])
    )
    assert calmer == []


def test_the_realert_factor_is_configurable() -> None:
    monitor = AnomalyMonitor(AnomalyConfig(realert_factor=1e6))
    for step in range(50):
        monitor.check(grad_record(step, 0.2))
    assert len(monitor.check(grad_record(50, 6.4))) == 1
    assert monitor.check(grad_record(51, 1309.0)) == []


def test_a_loss_spike_ten_times_further_within_the_cooldown_alerts_again() -> None:
    monitor = AnomalyMonitor()
    found = []
    for step in range(120):
        loss = {100: 1.0, 101: 0.9, 105: 12.0}.get(step, 0.05 * (1 + 0.1 * (step % 3)))
        found += [step for _ in monitor.check({"step": step, "loss": {"actor_loss": loss}})]
    assert found == [100, 105]  # 0.9 is the same incident; 12 is >10x further out


def test_each_loss_has_its_own_incident_and_one_step_gives_one_anomaly() -> None:
    monitor = AnomalyMonitor()
    found = []
    for step in range(120):
        actor = 2.0 if step in (100, 110) else 0.05
        critic = 9.0 if step in (103, 110) else 0.5
        losses = {"actor_loss": actor, "critic_loss": critic}
        found += [(step, a) for a in monitor.check({"step": step, "loss": losses})]
    # The flat value loss is also not decreasing (step 84); the critic spike 3
    # steps after the actor's is a new incident, not its cooldown.
    assert [(step, a["type"]) for step, a in found] == [
        (84, "loss_not_decreasing"),
        (100, "loss_spike"),
        (103, "loss_spike"),
    ]
    found = found[1:]
    assert found[0][1]["message"].startswith("loss.actor_loss 2 is")
    assert found[1][1]["message"].startswith("loss.critic_loss 9 is")


def test_two_losses_spiking_at_one_step_make_one_anomaly_naming_both() -> None:
    monitor = AnomalyMonitor()
    for step in range(100):
        monitor.check({"step": step, "loss": {"actor_loss": 0.05, "critic_loss": 0.5}})
    (anomaly,) = monitor.check({"step": 100, "loss": {"actor_loss": 3.0, "critic_loss": 50.0}})
    assert anomaly["type"] == "loss_spike"
    assert "loss.actor_loss 3 is" in anomaly["message"]
    assert "loss.critic_loss 50 is" in anomaly["message"]


def write_through_the_callback(stream: Stream, tmp_path: Path, steps: int, fault: Fault) -> Path:
    """Feed the stream the way its trainer does: verl's tracking backend, or
    PlatformCallback's hooks (TRL and HF go through the HF adapter's `on_log`)."""
    if stream.name.startswith("verl"):
        backend = VerlTrackingBackend("run", tmp_path)
        for step, metrics in metrics_stream(stream, steps, fault):
            backend.log(metrics, step)
        backend.finish()
    else:
        callback = PlatformCallback("run", tmp_path)
        for step, metrics in metrics_stream(stream, steps, fault):
            callback.on_log(step, metrics)
            callback.commit_step()
        callback.on_train_end()
    return tmp_path / "run_metrics.jsonl"


@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_the_callback_writes_policy_loss_faults_into_its_metrics_file(
    stream: Stream, tmp_path: Path
) -> None:
    spiked, freeze = spike(stream.policy_key, 300), frozen(stream.policy_key, 600)

    def faults(step: int, metrics: dict[str, Any]) -> None:
        spiked(step, metrics)
        freeze(step, metrics)

    path = write_through_the_callback(stream, tmp_path, 800, faults)
    records = read_records(path)
    found = [(r["step"], a["type"], a["message"]) for r in records for a in r.get("anomalies", ())]

    assert [kind for _, kind, _ in found] == ["loss_spike", "loss_plateau"]
    assert found[0][0] == 300
    assert 600 < found[1][0] <= 600 + PATIENCE
    assert all(message.startswith(f"loss.{stream.policy_field} ") for _, _, message in found)
    assert read_status(tmp_path / "run_status.json")["anomaly_detected"] is True


@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_the_callback_raises_nothing_on_a_healthy_stream(stream: Stream, tmp_path: Path) -> None:
    path = write_through_the_callback(stream, tmp_path, 2000, lambda step, metrics: None)
    records = read_records(path)
    assert len(records) == 2000
    assert [r["step"] for r in records if r.get("anomalies")] == []
