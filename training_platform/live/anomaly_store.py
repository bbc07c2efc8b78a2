"""What the platform's own detector sources share: a state per job, and storing findings.

The sample and system diagnostics (and any detector source after them) store
their findings as anomaly rows of their own `source`, one per (job, step,
type, source), refresh a finding stored before rather than add it again,
move each open incident's `end_step`, and announce only what is new.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.metrics_file import upsert_anomalies
from training_platform.live.incident_extents import record_extents
from training_platform.store.models import Anomaly

M = TypeVar("M")


def store_findings(
    factory: sessionmaker[Session],
    job_id: str,
    source: str,
    rows: list[dict[str, Any]],
    extents: Iterable[tuple[str, int, int]],
) -> list[dict[str, Any]]:
    """Upsert `rows` (anomaly rows of `source`), record `extents` (type, alert step,
    last step held); return the rows whose (step, type) was not stored yet, once each."""
    steps = sorted({row["step"] for row in rows})
    with factory() as session:
        existing = set()
        for start in range(0, len(steps), 500):
            existing |= {
                (step, kind)
                for step, kind in session.execute(
                    select(Anomaly.step, Anomaly.type).where(
                        Anomaly.job_id == job_id,
                        Anomaly.source == source,
                        Anomaly.step.in_(steps[start : start + 500]),
                    )
                )
            }
        if rows:
            upsert_anomalies(session, rows)
        record_extents(session, job_id, source, extents)
        session.commit()
    new: list[dict[str, Any]] = []
    for row in rows:
        key = (row["step"], row["type"])
        if key not in existing:
            existing.add(key)
            new.append(row)
    return new


class JobMonitors(Generic[M]):
    """One detector state per job (built by `make` on first use), safe across threads:
    jobs are diagnosed on several, one job's batches one at a time (its sync lock)."""

    def __init__(self, make: Callable[[], M]) -> None:
        self._make = make
        self._monitors: dict[str, M] = {}
        self._guard = threading.Lock()

    def get(self, job_id: str) -> M:
        with self._guard:
            monitor = self._monitors.get(job_id)
            if monitor is None:
                monitor = self._monitors[job_id] = self._make()
            return monitor

    def find(self, job_id: str) -> M | None:
        with self._guard:
            return self._monitors.get(job_id)

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._monitors.pop(job_id, None)


class DetectorSource(Generic[M]):
    """What each platform detector source keeps (samples, system): a detector state per
    job (`make`), the session factory its findings are stored with and the clock
    that stamps them. Thread-safe across jobs; one job's batches come in commit
    order (the job's sync lock)."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        make: Callable[[], M],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._factory = factory
        self._clock = clock
        self._monitors = JobMonitors(make)

    def forget(self, job_id: str) -> None:
        self._monitors.forget(job_id)
