"""`anomalies.end_step`: the platform records how far each alert's condition reached,
in the batch's transaction, across batches, a restart and both kinds of finding."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tests.live.test_diagnostics import diagnostics, ingest, write
from tests.live.test_sample_detectors import FAULT_STEP, cut, healthy_step
from training_platform.ingest.registry import discover_jobs
from training_platform.live.sample_diagnostics import SampleDiagnostics
from training_platform.store.models import Anomaly

Factory = sessionmaker[Session]


def extents(factory: Factory, source: str) -> list[tuple[int, str, int | None]]:
    with factory() as session:
        rows = session.execute(
            select(Anomaly.step, Anomaly.type, Anomaly.end_step)
            .where(Anomaly.job_id == "run1", Anomaly.source == source)
            .order_by(Anomaly.step)
        )
        return [(step, kind, end) for step, kind, end in rows]


def kl(blown_from: int, blown_to: int) -> Any:
    return lambda step: {"mean": 3.0 if blown_from <= step < blown_to else 0.01}


def test_an_alert_reaches_to_the_last_step_its_condition_held_across_batches(
    session_factory: Factory, run1: Path
) -> None:
    platform = diagnostics(session_factory)
    write(run1, range(0, 40), kl=kl(30, 70))
    assert [a["step"] for a in ingest(session_factory, run1, platform)] == [30]
    assert extents(session_factory, "platform") == [(30, "kl_explosion", 39)]

    write(run1, range(40, 100), kl=kl(30, 70))
    assert ingest(session_factory, run1, platform) == []  # the same incident: no new alert
    assert extents(session_factory, "platform") == [(30, "kl_explosion", 69)]


def test_a_restarted_platform_goes_on_extending_the_alert_stored_before(
    session_factory: Factory, run1: Path
) -> None:
    write(run1, range(0, 40), kl=kl(30, 200))
    ingest(session_factory, run1, diagnostics(session_factory))

    restarted = diagnostics(session_factory)  # warmed up from the stored history
    write(run1, range(40, 120), kl=kl(30, 200))
    assert ingest(session_factory, run1, restarted) == []
    assert extents(session_factory, "platform") == [(30, "kl_explosion", 119)]


def test_a_finding_from_samples_reaches_to_the_last_step_it_held(
    session_factory: Factory, metrics_dir: Path
) -> None:
    (metrics_dir / "run1_metrics.jsonl").write_bytes(b"")
    with session_factory.begin() as session:
        discover_jobs(session, metrics_dir)
    diagnosis, rng = SampleDiagnostics(session_factory), random.Random(7)
    for step in range(FAULT_STEP):
        assert diagnosis.diagnose("run1", healthy_step(rng, step)) == []

    for first in (FAULT_STEP, FAULT_STEP + 10):  # two batches of ten truncated steps
        batch = []
        for step in range(first, first + 10):
            samples = healthy_step(rng, step)
            cut(samples, range(4, 32))
            batch += samples
        diagnosis.diagnose("run1", batch)

    assert extents(session_factory, "samples") == [(FAULT_STEP, "truncation", FAULT_STEP + 19)]
