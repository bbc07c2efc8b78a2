"""How far this process's syncs of each job have got: what a caller that cannot
wait is answered (a budgeted `POST .../sync` while another sync holds the job,
or a process that does not hold the job's ingest lease)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.metrics_file import METRICS
from training_platform.ingest.persister import SyncResult
from training_platform.store.models import SyncState


class SyncProgress:
    """Job id -> (offset, file size) of its metrics file after this process's last commit."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self._factory = factory
        self._reached: dict[str, tuple[int, int]] = {}

    def note(self, job_id: str, kind: LineFileKind, result: SyncResult) -> None:
        if kind.name == METRICS.name:  # the job's metrics, whichever tool wrote them
            self._reached[job_id] = (result.offset, result.file_size)

    def forget(self, job_id: str) -> None:
        self._reached.pop(job_id, None)

    def of(self, job_id: str) -> SyncResult:
        """What a sync in flight has reached: offset and file size at its last commit;
        the stored offset when this process has committed none."""
        reached = self._reached.get(job_id)
        if reached is None:
            with self._factory() as session:
                state = session.get(SyncState, (job_id, METRICS.name))
                offset = state.offset if state is not None else 0
            reached = (offset, offset)
        offset, file_size = reached
        return SyncResult(job_id=job_id, offset=offset, file_size=file_size, at_eof=False)
