"""The sample detectors on the demo's real samples: silent while healthy, quick on a fault.

The demo trains a real policy and logs what it generated (docs/trainer.md):
a healthy run must raise no finding from its samples, and the learning-rate
blow-up it can inject must be caught from the samples within 5 steps.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.demo import DemoConfig, run_demo
from training_platform.services import build_services
from training_platform.settings import Settings
from training_platform.store.models import Anomaly


def sample_findings(
    factory: sessionmaker[Session], settings: Settings, job_id: str
) -> list[tuple[int, str]]:
    services = build_services(factory, settings)
    try:
        services.sync.sync_job(job_id)
    finally:
        services.close()
    with factory() as session:
        rows = session.execute(
            select(Anomaly.step, Anomaly.type)
            .where(Anomaly.job_id == job_id, Anomaly.source == "samples")
            .order_by(Anomaly.step)
        )
        return [(step, kind) for step, kind in rows]


def test_a_healthy_demo_run_raises_no_finding_from_its_samples(
    session_factory: sessionmaker[Session], settings: Settings, metrics_dir: Path
) -> None:
    result = run_demo("healthy", metrics_dir, DemoConfig(steps=200))
    assert result.status == "completed"

    assert sample_findings(session_factory, settings, "healthy") == []


def test_the_demos_learning_rate_blow_up_is_caught_from_its_samples_within_5_steps(
    session_factory: sessionmaker[Session], settings: Settings, metrics_dir: Path
) -> None:
    spike = 100
    run_demo("spiky", metrics_dir, DemoConfig(steps=130, lr_spike_at=spike))

    findings = sample_findings(session_factory, settings, "spiky")

    assert findings, "no finding from the samples of a blown-up run"
    assert all(step >= spike for step, _ in findings)  # nothing before the fault
    assert spike <= findings[0][0] <= spike + 5
