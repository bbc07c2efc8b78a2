"""How far each stored alert reaches: `anomalies.end_step`, kept by the platform's detectors.

A detector alerts at an incident's onset (and again if it escalates), then
stays quiet while the condition lasts; its state knows the last step the
condition held (`AnomalyMonitor.extents`, `SampleMonitor.extents`). After
each diagnosed batch the platform writes that step onto the alert's stored
row, in the batch's transaction, so the API can draw the incident as a span.

The row is the latest one of that type and source at or before the alert's
step, not the alert's exact step: detectors warmed up after a restart may
place an old incident's alert a little later than the one stored then.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from training_platform.store.models import Anomaly


def record_extents(
    session: Session, job_id: str, source: str, extents: Iterable[tuple[str, int, int]]
) -> None:
    """Set `end_step` to `last_seen` on the alert row of each (type, alert step, last_seen)."""
    for kind, alerted_at, last_seen in extents:
        alert_row = (
            select(func.max(Anomaly.step))
            .where(
                Anomaly.job_id == job_id,
                Anomaly.source == source,
                Anomaly.type == kind,
                Anomaly.step <= alerted_at,
            )
            .scalar_subquery()
        )
        session.execute(
            update(Anomaly)
            .where(
                Anomaly.job_id == job_id,
                Anomaly.source == source,
                Anomaly.type == kind,
                Anomaly.step == alert_row,
                or_(Anomaly.end_step.is_(None), Anomaly.end_step != last_seen),
            )
            .values(end_step=last_seen)
            .execution_options(synchronize_session=False)
        )
