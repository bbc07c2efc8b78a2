"""Platform-side diagnosis on both databases: stored once, marked by source, restart-safe."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.history.metrics_query import list_anomalies
from training_platform.ingest.metrics_file import sync_metrics_from_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.sync_service import SyncService
from training_platform.live.diagnostics import PlatformDiagnostics
from training_platform.live.pipeline import LivePipeline
from training_platform.settings import Settings
from training_platform.store.jobs import summarize_jobs

Factory = sessionmaker[Session]


def write(path: Path, steps: range, **groups: Callable[[int], dict[str, Any]]) -> None:
    with path.open("ab") as handle:
        for step in steps:
            metrics = {name: make(step) for name, make in groups.items()}
            handle.write(encode_record(build_record(step, metrics, timestamp=1000.0 + step)))


def ingest(factory: Factory, path: Path, diagnostics: PlatformDiagnostics) -> list[dict[str, Any]]:
    """Sync the file; return what the diagnostics announced as new."""
    found: list[dict[str, Any]] = []
    reader = LocalMetricsReader("run1", path.parent)
    sync_metrics_from_file(
        factory,
        "run1",
        reader,
        on_commit=lambda batch: found.extend(diagnostics.diagnose("run1", batch.records)),
    )
    return found


def diagnostics(factory: Factory, **config: Any) -> PlatformDiagnostics:
    warmup = config.pop("warmup_records", 500)
    return PlatformDiagnostics(factory, AnomalyConfig(**config), warmup_records=warmup)


def stored(factory: Factory) -> list[tuple[int, str, str]]:
    with factory() as session:
        return [(a.step, a.type, a.source) for a in list_anomalies(session, job_id="run1")]


def test_findings_are_stored_as_platform_beside_the_callbacks_own(
    session_factory: Factory, run1: Path, settings: Settings
) -> None:
    write(run1, range(3), loss=lambda s: {"total_loss": 1.0})
    with run1.open("ab") as handle:  # the trainer's callback flagged step 3 itself
        record = build_record(
            3,
            {"loss": {"total_loss": math.nan}},
            timestamp=1003.0,
            anomalies=[{"type": "nan_inf", "severity": "critical", "message": "loss is NaN"}],
        )
        handle.write(encode_record(record))
    pipeline = LivePipeline(
        queue_size=10,
        max_message_bytes=1 << 20,
        diagnostics=diagnostics(session_factory),
    )
    service = SyncService(session_factory, settings, listener=pipeline)

    service.sync_job("run1")

    assert stored(session_factory) == [(3, "nan_inf", "callback"), (3, "nan_inf", "platform")]
    with session_factory() as session:
        (summary,) = summarize_jobs(session, "run1")
    # One incident (step 3, nan_inf) found by both sources: counted once, as listed.
    assert summary.anomaly_count == 1


def test_a_finding_is_announced_once_even_when_the_same_step_is_diagnosed_again(
    session_factory: Factory, run1: Path
) -> None:
    write(run1, range(5), kl=lambda s: {"mean": 5.0 if s == 3 else 0.01})
    first = ingest(session_factory, run1, diagnostics(session_factory))
    # Another process (or a restart) diagnosing the same stored step finds it stored.
    again = diagnostics(session_factory, warmup_records=0).diagnose(
        "run1", [build_record(3, {"kl": {"mean": 5.0}}, timestamp=1003.0)]
    )

    assert [(a["step"], a["type"], a["source"]) for a in first] == [(3, "kl_explosion", "platform")]
    assert again == []
    assert stored(session_factory) == [(3, "kl_explosion", "platform")]


def test_a_restart_does_not_re_alert_an_ongoing_incident(
    session_factory: Factory, run1: Path
) -> None:
    high_kl = {"kl": lambda s: {"mean": 3.0}}
    write(run1, range(15), **high_kl)
    assert [a["step"] for a in ingest(session_factory, run1, diagnostics(session_factory))] == [0]

    write(run1, range(15, 30), **high_kl)  # still exploding after the restart
    after_restart = ingest(session_factory, run1, diagnostics(session_factory))

    assert after_restart == []
    # Without the warm-up the same records would raise the incident again.
    cold = diagnostics(session_factory, warmup_records=0)
    assert [
        a["step"] for a in cold.diagnose("run1", [build_record(30, {"kl": {"mean": 3.0}})])
    ] == [30]


def test_a_restart_does_not_forget_how_long_the_loss_has_been_flat(
    session_factory: Factory, run1: Path
) -> None:
    # Falls for 20 steps, then freezes at step 20 (updates stopped).
    frozen = {"loss": lambda s: {"total_loss": 2.0 - 0.05 * min(s, 20)}}
    write(run1, range(26), **frozen)
    assert ingest(session_factory, run1, diagnostics(session_factory, loss_patience=10)) == []

    write(run1, range(26, 40), **frozen)
    found = ingest(session_factory, run1, diagnostics(session_factory, loss_patience=10))

    # Flat from step 20, ten steps on: step 30, as without a restart.
    assert [(a["step"], a["type"]) for a in found] == [(30, "loss_plateau")]


def test_a_rewritten_step_takes_its_old_findings_with_it(
    session_factory: Factory, run1: Path
) -> None:
    write(run1, range(10), loss=lambda s: {"total_loss": math.nan if s == 6 else 1.0 / (s + 1)})
    detectors = diagnostics(session_factory)
    assert [a["step"] for a in ingest(session_factory, run1, detectors)] == [6]

    # Resumed from a checkpoint at step 5: steps 5.. again, healthy this time.
    write(run1, range(5, 12), loss=lambda s: {"total_loss": 1.0 / (s + 1)})
    assert ingest(session_factory, run1, detectors) == []

    assert stored(session_factory) == []
