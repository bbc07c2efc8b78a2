"""The live outbox: every live announcement of a job, numbered, for every server process.

Several processes on one PostgreSQL database (DESIGN.md §9) each serve live
clients, but only one ingests a given batch. So each announcement gets the
job's next number (`jobs.live_seq`, incremented under the job row's lock:
gap-free and in commit order) and a row here, written in the transaction
that stores what it announces; a rolled-back transaction takes its number
back with it. A process delivers a job's rows in number order, from the
first it has not delivered (`live/cluster_feed.py`), so a missed or late
notification never loses or repeats one.

Only used where several processes can share the database: `is_shared`
says so (PostgreSQL). SQLite keeps one process and its in-memory path.
"""

from __future__ import annotations

import time
from typing import Any, Final, NamedTuple

import orjson
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from training_platform.store.models import Job, LiveOutbox

ANNOUNCED_KINDS: Final = ("metrics", "samples", "system")
"""The line files whose batches are announced live (the others are only stored)."""


class OutboxEntry(NamedTuple):
    seq: int
    kind: str
    payload: Any  # decoded JSON


def is_shared(session: Session) -> bool:
    """Whether other server processes may share this session's database."""
    return session.get_bind().dialect.name == "postgresql"


def append_outbox(session: Session, job_id: str, kind: str, payload: Any) -> int:
    """Number an announcement and store it, in the caller's transaction; its number.

    The UPDATE takes the job row's lock until the transaction ends, so numbers
    are handed out in commit order with no gap (a rollback returns its number).
    """
    seq = session.execute(
        update(Job)
        .where(Job.job_id == job_id)
        .values(live_seq=Job.live_seq + 1)
        .returning(Job.live_seq)
        .execution_options(synchronize_session=False)
    ).scalar_one()
    session.add(
        LiveOutbox(
            job_id=job_id,
            seq=seq,
            kind=kind,
            payload=orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS).decode(),
            created_at=time.time(),
        )
    )
    session.flush()
    return int(seq)


def latest_seq(session: Session, job_ids: list[str]) -> dict[str, int]:
    """Each known job's latest announcement number."""
    if not job_ids:
        return {}
    rows = session.execute(select(Job.job_id, Job.live_seq).where(Job.job_id.in_(job_ids)))
    return {job_id: int(seq) for job_id, seq in rows}


def read_outbox(session: Session, job_id: str, after: int, limit: int) -> list[OutboxEntry]:
    """The job's announcements numbered after `after`, in order, at most `limit`."""
    rows = session.execute(
        select(LiveOutbox.seq, LiveOutbox.kind, LiveOutbox.payload)
        .where(LiveOutbox.job_id == job_id, LiveOutbox.seq > after)
        .order_by(LiveOutbox.seq)
        .limit(limit)
    )
    return [OutboxEntry(int(seq), kind, orjson.loads(payload)) for seq, kind, payload in rows]


def prune_outbox(session: Session, older_than: float) -> int:
    """Drop announcements stored before `older_than` (epoch seconds); how many."""
    result = session.execute(
        delete(LiveOutbox)
        .where(LiveOutbox.created_at < older_than)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
