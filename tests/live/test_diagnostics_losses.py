"""The platform's diagnosis of verl-, TRL- and HF-shaped files, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.callbacks.loss_streams import (
    HEALTHY,
    STREAMS,
    Fault,
    Stream,
    frozen,
    metrics_stream,
    spike,
    stalled,
    verl_ppo,
)
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.history.metrics_query import list_anomalies
from training_platform.ingest.metrics_file import sync_metrics_from_file
from training_platform.ingest.persister import CommittedBatch
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.registry import discover_jobs
from training_platform.live.diagnostics import PlatformDiagnostics, anomaly_config
from training_platform.settings import Settings

Factory = sessionmaker[Session]
PATIENCE = AnomalyConfig().loss_patience
ids = [stream.name for stream in STREAMS]


@pytest.fixture
def run_file(metrics_dir: Path, session_factory: Factory) -> Path:
    path = metrics_dir / "run_metrics.jsonl"
    path.write_bytes(b"")
    with session_factory.begin() as session:
        discover_jobs(session, metrics_dir)
    return path


def write(path: Path, stream: Stream, steps: range, fault: Fault | None = None) -> None:
    """Append the stream's `steps` as its trainer writes them: verl's own file
    logger (``{"step", "data"}``) for verl, our callback's records otherwise."""
    with path.open("ab") as handle:
        for step, metrics in metrics_stream(stream, steps.stop, fault):
            if step not in steps:
                continue
            if stream.name.startswith("verl"):
                handle.write(json.dumps({"step": step, "data": metrics}).encode() + b"\n")
            else:
                handle.write(encode_record(build_record(step, metrics, timestamp=1e9 + step)))


def ingest(factory: Factory, path: Path, diagnostics: PlatformDiagnostics) -> None:
    def diagnose(batch: CommittedBatch) -> None:
        diagnostics.diagnose("run", batch.records)

    sync_metrics_from_file(
        factory, "run", LocalMetricsReader("run", path.parent), on_commit=diagnose
    )


def stored(factory: Factory) -> list[tuple[int, str, str, str]]:
    with factory() as session:
        return [
            (a.step, a.type, a.source, a.message) for a in list_anomalies(session, job_id="run")
        ]


@pytest.mark.parametrize("stream", STREAMS, ids=ids)
def test_the_platform_flags_policy_loss_faults_and_nothing_else(
    stream: Stream, session_factory: Factory, run_file: Path, settings: Settings
) -> None:
    spiked, freeze = spike(stream.policy_key, 300), frozen(stream.policy_key, 600)

    def faults(step: int, metrics: dict[str, Any]) -> None:
        spiked(step, metrics)
        freeze(step, metrics)

    write(run_file, stream, range(800), faults)
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, anomaly_config(settings))
    )

    found = stored(session_factory)
    assert [(kind, source) for _, kind, source, _ in found] == [
        ("loss_spike", "platform"),
        ("loss_plateau", "platform"),
    ]
    assert found[0][0] == 300
    assert 600 < found[1][0] <= 600 + PATIENCE
    assert all(message.startswith(f"loss.{stream.policy_field} ") for *_, message in found)


@pytest.mark.parametrize("stream", HEALTHY, ids=[stream.name for stream in HEALTHY])
def test_the_platform_raises_nothing_on_a_healthy_stream(
    stream: Stream, session_factory: Factory, run_file: Path, settings: Settings
) -> None:
    write(run_file, stream, range(2000))
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, anomaly_config(settings))
    )
    assert stored(session_factory) == []


def test_a_stall_is_found_at_the_same_step_across_a_restart(
    session_factory: Factory, run_file: Path
) -> None:
    stream = next(s for s in STREAMS if s.name == "hf_sft")
    assert stream.falling_key is not None
    fault = stalled(stream.falling_key, 150)
    config = AnomalyConfig()
    monitor = AnomalyMonitor(config)  # the same detectors, without a restart
    expected = [
        (step, anomaly["type"])
        for step, metrics in metrics_stream(stream, 400, stalled(stream.falling_key, 150))
        for anomaly in monitor.check(build_record(step, metrics, timestamp=1e9 + step))
    ]
    assert [kind for _, kind in expected] == ["loss_plateau"]

    # A restart at step 160, with less history replayed than the run has: the
    # early level comes from the run's first records, the rest from the tail.
    write(run_file, stream, range(160), fault)
    ingest(session_factory, run_file, PlatformDiagnostics(session_factory, config))
    write(run_file, stream, range(160, 400), fault)
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, config, warmup_records=100)
    )

    assert [(step, kind) for step, kind, _, _ in stored(session_factory)] == expected


def test_the_platform_alerts_again_on_a_value_far_beyond_the_one_that_opened_the_incident(
    session_factory: Factory, run_file: Path, settings: Settings
) -> None:
    with run_file.open("ab") as handle:
        for step in range(60):
            norm = {50: 6.4, 51: 1309.0, 52: 40.0}.get(step, 0.2 + 0.01 * (step % 5))
            metrics = {"actor/grad_norm": norm}
            handle.write(encode_record(build_record(step, metrics, timestamp=1e9 + step)))
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, anomaly_config(settings))
    )

    found = stored(session_factory)
    assert [(step, kind) for step, kind, _, _ in found] == [
        (50, "gradient_explosion"),
        (51, "gradient_explosion"),
    ]
    assert found[1][3].startswith("gradient.actor_norm 1309 is")


def flat_value_loss(step: int, rng: random.Random) -> dict[str, Any]:
    """verl PPO whose value loss never moves off its start (a noisy flat line)."""
    metrics = verl_ppo(step, rng)
    metrics["critic/vf_loss"] = 0.8 * (1 + rng.gauss(0, 0.05))
    return metrics


NOT_DECREASING = (
    Stream("flat_value", flat_value_loss, "actor/pg_loss", "actor_loss", None, None),
    Stream("constant_lm", lambda step, rng: {"loss": 2.3}, "loss", "total_loss", None, None),
    Stream(
        "rising_lm",
        lambda step, rng: {"loss": (1.0 + 0.004 * step) * (1 + rng.gauss(0, 0.03))},
        "loss",
        "total_loss",
        None,
        None,
    ),
)


def callback_steps(stream: Stream, steps: int) -> list[tuple[int, str, str]]:
    """(step, type, message) the trainer's monitor raises over the stream."""
    monitor = AnomalyMonitor(AnomalyConfig())
    return [
        (step, anomaly["type"], anomaly["message"])
        for step, metrics in metrics_stream(stream, steps)
        for anomaly in monitor.check(build_record(step, metrics, timestamp=1e9 + step))
    ]


@pytest.mark.parametrize("stream", NOT_DECREASING, ids=[s.name for s in NOT_DECREASING])
def test_the_platform_flags_a_loss_that_does_not_decrease_where_the_callback_does(
    stream: Stream, session_factory: Factory, run_file: Path, settings: Settings
) -> None:
    expected = callback_steps(stream, 400)
    (step, kind, _), *more = expected
    assert kind == "loss_not_decreasing" and not more
    judged = AnomalyConfig().loss_start_judged_at - 1  # warm-up, start block, patience
    assert judged <= step <= judged + PATIENCE

    write(run_file, stream, range(400))
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, anomaly_config(settings))
    )

    assert [(s, k, m) for s, k, _, m in stored(session_factory)] == expected


@pytest.mark.parametrize("restart_at", [60, 100, 150])
def test_a_loss_not_decreasing_is_one_alert_across_a_restart(
    restart_at: int, session_factory: Factory, run_file: Path
) -> None:
    """Before its first judgement (the start level comes from the run's first
    records) or during the incident (not alerted again): as without a restart."""
    stream = NOT_DECREASING[0]
    expected = [(step, kind) for step, kind, _ in callback_steps(stream, 300)]
    config = AnomalyConfig()
    write(run_file, stream, range(restart_at))
    ingest(session_factory, run_file, PlatformDiagnostics(session_factory, config))
    write(run_file, stream, range(restart_at, 300))
    # Less history replayed than the run has: the head and the tail are not one.
    ingest(
        session_factory, run_file, PlatformDiagnostics(session_factory, config, warmup_records=30)
    )

    assert [(step, kind) for step, kind, _, _ in stored(session_factory)] == expected
