"""A job and where the sync of its metrics file starts, read in one statement."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.errors import JobNotFoundError
from training_platform.ingest.line_scanner import ReadPosition
from training_platform.ingest.metrics_file import METRICS
from training_platform.store.models import Job, SyncState


def load_job(factory: sessionmaker[Session], job_id: str) -> tuple[Job, ReadPosition | None]:
    """The job and its committed read position, in one statement.

    Read in autocommit (no BEGIN/ROLLBACK round trips): the position is only
    a starting point, the persister's compare-and-swap checks it. None when
    the job has no sync_state row yet (the persister creates it). Raises
    `JobNotFoundError`.
    """
    with factory() as session:
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        row = session.execute(
            select(Job, SyncState.offset, SyncState.fingerprint, SyncState.discarding)
            .outerjoin(
                SyncState, (SyncState.job_id == Job.job_id) & (SyncState.kind == METRICS.name)
            )
            .where(Job.job_id == validate_job_id(job_id))
        ).first()
    if row is None:
        raise JobNotFoundError(f"job {job_id!r} not found")
    job, offset, fingerprint, discarding = row
    if offset is None:
        return job, None
    return job, ReadPosition(offset, fingerprint, discarding)
