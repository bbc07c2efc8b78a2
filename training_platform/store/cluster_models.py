"""The tables through which server processes on one database know each other.

Kept apart from `store/models.py` (the run data): only the lease keeper
(`ingest/lease_keeper.py`) and `GET /api/instances` read or write them.
Times are Unix seconds from the *database's* clock (`store/leases.py`), so a
process whose own clock is skewed neither steals leases nor loses its own.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from training_platform.store.database import Base
from training_platform.store.models import JOB_ID

INSTANCE_ID = String(64)


class ServerInstance(Base):
    """A live `training-platform serve` process, as its heartbeats say."""

    __tablename__ = "server_instances"

    instance_id: Mapped[str] = mapped_column(INSTANCE_ID, primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)


class IngestLease(Base):
    """Which process ingests a job, until when, and the fencing token of that grant.

    `token` grows by one with every grant: a process that lost its lease (paused
    past its expiry, cut off from the database) still holds the old number, and
    the statement that would advance the job's offset checks it (`fence_holds`).
    """

    __tablename__ = "ingest_leases"
    __table_args__ = (Index("ix_ingest_leases_holder", "holder"),)

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    holder: Mapped[str | None] = mapped_column(INSTANCE_ID)  # None: free
    token: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    expires_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    renewed_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
