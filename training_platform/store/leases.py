"""Leases and heartbeats in the database: the statements behind one ingester per job.

Every time here is the database's clock (`db_now`), never a process's own:
a process whose clock runs ahead would otherwise see every lease expired and
take them all, and one whose clock lags would keep writing after its lease
ran out. Each statement that grants, renews or checks a lease compares with
the clock in the same statement, so no read-then-write window exists.

A grant bumps the job's fencing `token`. The offset compare-and-swap of a
fenced sync (`fence_holds`) requires the lease to still name this holder
with this token and to be unexpired: a process paused past its expiry
(SIGSTOP, a long GC, a network partition) cannot commit when it resumes,
whether or not another process has taken the job meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Float,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session

from training_platform.store.cluster_models import IngestLease, ServerInstance
from training_platform.store.database import dialect_insert
from training_platform.store.models import Job

_UNIX_EPOCH_JULIAN_DAY = 2440587.5


@dataclass(frozen=True)
class Fence:
    """The lease a sync writes under: its holder and the token of that grant."""

    holder: str
    token: int


@dataclass(frozen=True)
class LeaseRow:
    """One job's lease as a keeper's round sees it (with what grouping needs)."""

    job_id: str
    holder: str | None
    token: int
    expired: bool  # by the database's clock, at the time of the read
    renewed_at: float
    source: str
    ssh_host: str | None
    status: str


def db_now(session: Session) -> ColumnElement[float]:
    """The database's clock in Unix seconds, as an SQL expression."""
    if session.get_bind().dialect.name == "postgresql":
        # clock_timestamp(), not now(): now() is frozen at the transaction's start.
        return func.extract("epoch", func.clock_timestamp()).cast(Float)
    return (func.julianday("now") - _UNIX_EPOCH_JULIAN_DAY) * 86400.0


def read_db_now(session: Session) -> float:
    return float(session.execute(select(db_now(session))).scalar_one())


# -- instances ---------------------------------------------------------------------


def heartbeat(
    session: Session, instance_id: str, *, hostname: str, pid: int, version: str
) -> float:
    """Record that `instance_id` lives (inserted on its first beat); the database's now."""
    now = read_db_now(session)
    insert = dialect_insert(session)
    values = {"hostname": hostname, "pid": pid, "version": version, "heartbeat_at": now}
    session.execute(
        insert(ServerInstance)
        .values(instance_id=instance_id, started_at=now, **values)
        .on_conflict_do_update(index_elements=["instance_id"], set_=values)
    )
    return now


def instances(session: Session) -> list[ServerInstance]:
    return list(session.scalars(select(ServerInstance).order_by(ServerInstance.started_at)))


def forget_instance(session: Session, instance_id: str) -> None:
    session.execute(delete(ServerInstance).where(ServerInstance.instance_id == instance_id))


def prune_instances(session: Session, older_than: float) -> int:
    """Delete instances whose last heartbeat is older than `older_than` seconds."""
    result = session.execute(
        delete(ServerInstance).where(ServerInstance.heartbeat_at < db_now(session) - older_than)
    )
    return int(cast(CursorResult[Any], result).rowcount or 0)


# -- leases -------------------------------------------------------------------------


def ensure_leases(session: Session) -> None:
    """Give every job without one a free lease row (what claims update)."""
    insert = dialect_insert(session)
    missing = select(Job.job_id).where(~exists().where(IngestLease.job_id == Job.job_id))
    session.execute(
        insert(IngestLease)
        .from_select(["job_id"], missing)
        .on_conflict_do_nothing(index_elements=["job_id"])
    )


def lease_rows(session: Session) -> list[LeaseRow]:
    """Every job's lease with its source and host (one statement)."""
    now = db_now(session)
    rows = session.execute(
        select(
            IngestLease.job_id,
            IngestLease.holder,
            IngestLease.token,
            IngestLease.expires_at <= now,
            IngestLease.renewed_at,
            Job.source,
            Job.ssh_host,
            Job.status,
        ).join(Job, Job.job_id == IngestLease.job_id)
    )
    return [LeaseRow(*row) for row in rows]


def renew(session: Session, holder: str, period: float) -> dict[str, int]:
    """Extend every lease `holder` still holds; {job id: token} of those.

    A lease that expired but that no one took is still renewed: nobody wrote
    under another token meanwhile, and its own token is unchanged.
    """
    now = db_now(session)
    rows = session.execute(
        update(IngestLease)
        .where(IngestLease.holder == holder)
        .values(expires_at=now + period, renewed_at=now)
        .returning(IngestLease.job_id, IngestLease.token)
        .execution_options(synchronize_session=False)
    )
    return {job_id: token for job_id, token in rows}


def claim(
    session: Session,
    holder: str,
    job_ids: list[str],
    period: float,
    *,
    dead_holders: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Take those of `job_ids` whose lease is free, expired, or held by one of
    `dead_holders` (processes known to be gone); {job id: new token} of those taken."""
    if not job_ids:
        return {}
    now = db_now(session)
    takeable = or_(
        IngestLease.holder.is_(None),
        IngestLease.expires_at <= now,
        IngestLease.holder.in_(sorted(dead_holders)) if dead_holders else literal(False),
    )
    rows = session.execute(
        update(IngestLease)
        .where(IngestLease.job_id.in_(job_ids), takeable)
        .values(
            holder=holder,
            token=IngestLease.token + 1,
            expires_at=now + period,
            renewed_at=now,
        )
        .returning(IngestLease.job_id, IngestLease.token)
        .execution_options(synchronize_session=False)
    )
    return {job_id: token for job_id, token in rows}


def release(session: Session, holder: str, job_ids: list[str] | None = None) -> list[str]:
    """Free `holder`'s leases (all of them when `job_ids` is None); the ids freed."""
    statement = update(IngestLease).where(IngestLease.holder == holder)
    if job_ids is not None:
        statement = statement.where(IngestLease.job_id.in_(job_ids))
    rows = session.execute(
        statement.values(holder=None, expires_at=0.0)
        .returning(IngestLease.job_id)
        .execution_options(synchronize_session=False)
    )
    return list(rows.scalars())


# The lease the current sync writes under (set by the sync service around a
# fenced sync, in the thread that runs it): the compare-and-swap statements of
# every file kind read it, without each layer between passing it down.
_writing_under: ContextVar[Fence | None] = ContextVar("writing_under", default=None)


@contextlib.contextmanager
def writing_under(fence: Fence | None) -> Iterator[None]:
    """Fence every compare-and-swap made inside the block with `fence` (None: unfenced)."""
    reset = _writing_under.set(fence)
    try:
        yield
    finally:
        _writing_under.reset(reset)


def current_fence() -> Fence | None:
    return _writing_under.get()


def fence_clause(session: Session, job_id: str) -> ColumnElement[bool]:
    """What a compare-and-swap of `job_id` adds to its WHERE: the current fence holds
    (true when the sync is not fenced: one process, or a command-line sync)."""
    fence = _writing_under.get()
    return true() if fence is None else fence_holds(session, job_id, fence)


def fence_holds(session: Session, job_id: str, fence: Fence) -> ColumnElement[bool]:
    """True while `fence` is the job's current, unexpired grant: the condition a
    fenced compare-and-swap adds, evaluated in that same statement."""
    return exists().where(
        IngestLease.job_id == job_id,
        IngestLease.holder == fence.holder,
        IngestLease.token == fence.token,
        IngestLease.expires_at > db_now(session),
    )


def fence_is_current(session: Session, job_id: str, fence: Fence) -> bool:
    """Whether `fence` still holds (after a lost compare-and-swap: lost race or lost lease?)."""
    return bool(session.execute(select(fence_holds(session, job_id, fence))).scalar_one())


@dataclass(frozen=True)
class Holding:
    job_id: str
    holder: str | None
    token: int
    renewed_at: float
    expires_at: float


def holdings(session: Session) -> tuple[float, list[ServerInstance], list[Holding]]:
    """The database's now, every instance, and every job's lease: what
    `GET /api/instances` shows."""
    now = read_db_now(session)
    rows = session.execute(
        select(
            IngestLease.job_id,
            IngestLease.holder,
            IngestLease.token,
            IngestLease.renewed_at,
            IngestLease.expires_at,
        ).order_by(IngestLease.job_id)
    )
    return now, instances(session), [Holding(*row) for row in rows]


@dataclass(frozen=True)
class Ingester:
    """The process that holds a job's lease now, as `GET /api/jobs` shows it."""

    instance_id: str
    hostname: str
    pid: int


def ingesters_of(session: Session, job_ids: list[str]) -> dict[str, Ingester]:
    """The live holder of each of `job_ids` whose lease is current (one statement;
    none on SQLite, where one process ingests everything without leases)."""
    if not job_ids or session.get_bind().dialect.name != "postgresql":
        return {}
    rows = session.execute(
        select(IngestLease.job_id, ServerInstance.instance_id, ServerInstance.hostname,
               ServerInstance.pid)
        .join(ServerInstance, ServerInstance.instance_id == IngestLease.holder)
        .where(IngestLease.job_id.in_(job_ids), IngestLease.expires_at > db_now(session))
    )  # fmt: skip
    return {job_id: Ingester(instance, host, pid) for job_id, instance, host, pid in rows}
