"""Whether a job has had an anomaly worth stopping for, whichever side found it.

The trainer says so in its status file (`anomaly_detected`, `anomaly_reason`,
copied onto the job as they are); the platform's detectors say so with a
critical incident (a NaN loss, a KL explosion). The job's first critical
incident is kept on it (`jobs.critical_incident`), set once: the API's
`anomaly_detected`, the live `status` message and the webhook's `job_anomaly`
event are the two together (docs/platform.md, "Health"). The webhook hears
of it once per job (`jobs.anomaly_alerted_at`), whichever side turned it,
across restarts and server processes.
"""

from __future__ import annotations

import time
from typing import Any, Final

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.store.models import Job

MAX_REASON_CHARS: Final = 1000


def incident_reason(incident: dict[str, Any]) -> str:
    """How a critical incident is named on its job: "<type> at step N: <message>"."""
    text = f"{incident['type']} at step {incident['step']}: {incident.get('message') or ''}"
    return text.rstrip(": ")[:MAX_REASON_CHARS]


class JobFlags:
    """The two marks kept on a job, each set once by one conditional UPDATE: of
    several server processes (or a restarted one) doing the same, exactly one
    sets it, and only that one announces it."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self._factory = factory

    def critical(self, job_id: str, reason: str) -> Job | None:
        """Keep `reason` as the job's first critical incident; the job (detached)
        when this call set it, None when one was kept already (or the job is gone)."""
        with self._factory() as session:
            result = session.execute(
                update(Job)
                .where(Job.job_id == job_id, Job.critical_incident.is_(None))
                .values(critical_incident=reason)
            )
            session.commit()
            if result.rowcount != 1:  # type: ignore[attr-defined]
                return None
            job = session.get(Job, job_id)
            if job is not None:
                session.expunge(job)
            return job

    def first_alert(self, job_id: str) -> bool:
        """Whether this call is the one to tell the webhook the job's anomaly flag
        turned (`jobs.anomaly_alerted_at` set now; False when it was set before)."""
        with self._factory() as session:
            result = session.execute(
                update(Job)
                .where(Job.job_id == job_id, Job.anomaly_alerted_at.is_(None))
                .values(anomaly_alerted_at=time.time())
            )
            session.commit()
            return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def anomaly_of(job: Job) -> tuple[bool, str | None]:
    """The job's `anomaly_detected` and `anomaly_reason`: the trainer's flag or a
    critical incident; the trainer's reason first (it knows the trainer's context)."""
    detected = bool(job.anomaly_detected) or job.critical_incident is not None
    return detected, job.anomaly_reason or job.critical_incident
