"""Platform-side diagnosis: the shared detectors, run over every newly stored record.

The trainer's callback may run the same detectors (`callbacks/detectors/monitor.py`), or
not, or with other thresholds: the platform looks for itself and stores what
it finds with ``source = "platform"`` (callback-reported anomalies keep
``source = "callback"``), one row per (job, step, type, source), each
with the last step its condition held (`incident_extents.py`).

Detectors are stateful (recent medians, loss levels, cooldowns) and must see a
job's records in step order. A job's `AnomalyMonitor` lives in memory; the
first time this process diagnoses a job it is warmed up by replaying the job's
stored history (its first `AnomalyConfig.early_records`, which set early
baselines such as entropy, each loss's early level and the start level that
`loss_not_decreasing` judges it by, then its most recent `warmup_records`)
with the alerts thrown away, because
those records were diagnosed before the restart. So a restart neither
re-alerts an ongoing incident (the cooldown state is rebuilt) nor starts
from zero (medians and baselines are rebuilt). A resumed run that rewrites
earlier steps gets the same treatment from the step it went back to.

What is left, said plainly: a crash in the instant between a batch's commit
and its diagnosis leaves that batch undiagnosed (it is replayed silently on
restart). The window is one function call long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.history.metrics_query import list_metrics
from training_platform.ingest.metrics_file import upsert_anomalies
from training_platform.live.incident_extents import record_extents
from training_platform.settings import Settings
from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import Anomaly, TrainingMetric

logger = logging.getLogger(__name__)

SOURCE = "platform"


def anomaly_config(settings: Settings) -> AnomalyConfig:
    """The platform's detector thresholds, from the server settings."""
    return AnomalyConfig(
        kl_threshold=settings.diagnostics_kl_threshold,
        loss_patience=settings.diagnostics_loss_patience,
        disabled=frozenset(settings.diagnostics_disabled),
    )


@dataclass
class _JobDetectors:
    monitor: AnomalyMonitor
    last_step: int | None = None  # the step fed last
    high: int | None = None  # the highest step fed by this process


class PlatformDiagnostics:
    """Runs the detectors over each job's new records and stores the anomalies.

    `diagnose` must be called with a job's records in commit order and never
    concurrently for one job (the sync service calls it under the job's lock);
    different jobs may be diagnosed from different threads.
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        config: AnomalyConfig,
        *,
        warmup_records: int = 500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._factory = factory
        self.config = config
        self.warmup_records = warmup_records
        self._clock = clock
        self._jobs: dict[str, _JobDetectors] = {}
        self._guard = threading.Lock()

    def diagnose(self, job_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Check `records` (just committed, in file order); return the anomalies new to the store.

        Each returned dict has job_id, step, type, severity, message, source
        and created_at. An anomaly already stored for the same step and type
        is refreshed but not returned, so nothing is announced twice.
        """
        if not records:
            return []
        with self._guard:
            state = self._jobs.get(job_id)
        found: list[dict[str, Any]] = []
        rediagnosed: list[int] = []
        now = self._clock()
        with self._factory() as session:
            if state is None:
                state = _JobDetectors(self._warmed_up(session, job_id, records[0]["step"]))
                with self._guard:
                    self._jobs[job_id] = state
            for record in records:
                step = record["step"]
                if state.last_step is not None and step <= state.last_step:
                    # A resumed run went back: rebuild the detectors from the
                    # history before this step (the rewritten steps are not in it).
                    state.monitor = self._warmed_up(session, job_id, step)
                if state.high is not None and step <= state.high:
                    # A new version of a step diagnosed before: its old findings
                    # go with the old record, as the callback's do.
                    rediagnosed.append(step)
                state.last_step = step
                state.high = step if state.high is None else max(state.high, step)
                for anomaly in state.monitor.check(record):
                    found.append({**anomaly, "job_id": job_id, "step": step})
            extents = state.monitor.extents(since=min(r["step"] for r in records))
            if not found and not rediagnosed and not extents:
                return []
            return self._store(session, job_id, found, rediagnosed, extents, now)

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._jobs.pop(job_id, None)

    def _store(
        self,
        session: Session,
        job_id: str,
        found: list[dict[str, Any]],
        rediagnosed: list[int],
        extents: list[tuple[str, int, int]],
        now: float,
    ) -> list[dict[str, Any]]:
        for start in range(0, len(rediagnosed), 500):
            session.execute(
                delete(Anomaly).where(
                    Anomaly.job_id == job_id,
                    Anomaly.source == SOURCE,
                    Anomaly.step.in_(rediagnosed[start : start + 500]),
                )
            )
        rows = [
            {
                "job_id": job_id,
                "step": anomaly["step"],
                "type": anomaly["type"],
                "severity": anomaly["severity"],
                "message": anomaly["message"],
                "source": SOURCE,
                "created_at": now,
                "end_step": anomaly["step"],
            }
            for anomaly in found
        ]
        existing: set[tuple[int, str]] = set()
        steps = sorted({row["step"] for row in rows})
        for start in range(0, len(steps), 500):
            query = select(Anomaly.step, Anomaly.type).where(
                Anomaly.job_id == job_id,
                Anomaly.source == SOURCE,
                Anomaly.step.in_(steps[start : start + 500]),
            )
            existing.update((step, kind) for step, kind in session.execute(query))
        if rows:
            upsert_anomalies(session, rows)
        record_extents(session, job_id, SOURCE, extents)
        session.commit()
        new, seen = [], set(existing)
        for row in rows:
            key = (row["step"], row["type"])
            if key not in seen:
                seen.add(key)
                new.append(row)
        return new

    def _warmed_up(self, session: Session, job_id: str, before_step: int) -> AnomalyMonitor:
        """A monitor that has silently seen the stored history before `before_step`."""
        monitor = AnomalyMonitor(self.config)
        if self.warmup_records <= 0 or before_step <= 0:
            return monitor
        # Early baselines (entropy, loss levels) come from a run's first records;
        # the rest of the state (medians, loss blocks, cooldowns) from its most
        # recent ones.
        head = list_metrics(
            session,
            job_id=job_id,
            end_step=before_step - 1,
            limit=self.config.early_records,
        )
        tail_rows = session.scalars(
            select(TrainingMetric)
            .where(TrainingMetric.job_id == job_id, TrainingMetric.step < before_step)
            .order_by(TrainingMetric.step.desc())
            .limit(self.warmup_records)
        ).all()
        tail = [row_to_record(row) for row in reversed(tail_rows)]
        first_tail_step = tail[0]["step"] if tail else before_step
        for record in [r for r in head if r["step"] < first_tail_step] + tail:
            monitor.check(record)  # alerts discarded: these records were diagnosed before
        logger.debug("warmed up the detectors of %s with %d records", job_id, len(tail))
        return monitor
