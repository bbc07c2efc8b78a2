"""Series read from existing state at scrape time: ingest per job, the database pool.

Nothing here is updated on a hot path: the sync service already notes each
committed batch (`ingest/ingest_stats.py`, one dict update), and SQLAlchemy's
pool knows its own numbers. Before the app's lifespan has started (no sync
service, no engine yet) the collectors yield nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from training_platform.ingest.ingest_stats import OTHER_JOBS
from training_platform.ingest.sync_service import SyncService

PREFIX = "training_platform_"


class IngestCollector(Collector):
    """What this process ingested per job and file kind (`IngestStats`).

    Only jobs this process has ingested since it started, at most
    `IngestStats.max_jobs` of them; any further job's counts are added to the
    `job_id="(other)"` series (which has no lag or timestamp).
    """

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        service: SyncService | None = getattr(self.app.state, "sync_service", None)
        if service is None:
            return
        labels = ["job_id", "kind"]
        records = CounterMetricFamily(
            PREFIX + "ingest_records",
            "Rows stored from a job's line file (metrics, samples) by this process.",
            labels=labels,
        )
        skipped = CounterMetricFamily(
            PREFIX + "ingest_lines_skipped",
            "Lines of a job's file skipped by this process: malformed (not JSON, not a "
            "record, refused by the database) or oversized (over PLATFORM_MAX_LINE_BYTES).",
            labels=[*labels, "reason"],
        )
        lag = GaugeMetricFamily(
            PREFIX + "ingest_lag_bytes",
            "Bytes of a job's file past its committed offset when this process last read "
            "it (0: caught up; a sync reads at most PLATFORM_SYNC_BATCH_BYTES per batch).",
            labels=labels,
        )
        last = GaugeMetricFamily(
            PREFIX + "ingest_last_record_timestamp_seconds",
            "Unix time this process last stored rows of a job's file "
            "(time() - this: seconds since the job's last commit here).",
            labels=labels,
        )
        for (job_id, kind), ingest in sorted(service.stats.snapshot().items()):
            records.add_metric([job_id, kind], ingest.records)
            skipped.add_metric([job_id, kind, "malformed"], ingest.malformed)
            skipped.add_metric([job_id, kind, "oversized"], ingest.oversized)
            if job_id == OTHER_JOBS:
                continue
            lag.add_metric([job_id, kind], ingest.bytes_behind)
            if ingest.last_record_at is not None:
                last.add_metric([job_id, kind], ingest.last_record_at)
        yield from (records, skipped, lag, last)


class PoolCollector(Collector):
    """The SQLAlchemy engine's connection pool (a `QueuePool` on PostgreSQL and on a
    SQLite file; other pools, e.g. an in-memory SQLite's, show only the info series)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        engine: Engine | None = getattr(self.app.state, "engine", None)
        if engine is None:
            return
        pool: Any = engine.pool
        info = GaugeMetricFamily(
            PREFIX + "db_pool_info",
            "The database dialect and its connection pool's class (always 1).",
            labels=["dialect", "pool"],
        )
        info.add_metric([engine.dialect.name, type(pool).__name__], 1)
        yield info
        if not all(hasattr(pool, name) for name in ("size", "checkedout", "checkedin")):
            return
        for name, doc, value in (
            ("size", "Connections the pool keeps (pool_size).", pool.size()),
            ("checked_out", "Connections in use by requests and syncs now.", pool.checkedout()),
            ("checked_in", "Idle connections held open in the pool now.", pool.checkedin()),
            (
                "overflow",
                "Connections open beyond the pool's size now (at most max_overflow).",
                max(0, pool.overflow()),
            ),
            ("max_overflow", "Connections allowed beyond the size.", pool._max_overflow),
        ):
            yield GaugeMetricFamily(PREFIX + "db_pool_" + name, doc, value=value)


class LeaseCollector(Collector):
    """This process's ingest leases (PostgreSQL, several processes: `ingest/lease_keeper.py`);
    nothing on SQLite, where one process ingests every job without leases."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        service: SyncService | None = getattr(self.app.state, "sync_service", None)
        keeper = service.leases if service is not None else None
        if keeper is None:
            return
        yield GaugeMetricFamily(
            PREFIX + "leases_held",
            "Jobs whose ingest lease this process holds now (it alone ingests them).",
            value=len(keeper.held()),
        )
        changes = CounterMetricFamily(
            PREFIX + "lease_changes",
            "Lease changes of this process: claimed (free, expired or a dead process's), "
            "released (fair share, shutdown), lost (taken over while this one held it).",
            labels=["change"],
        )
        for change in ("claimed", "released", "lost"):
            changes.add_metric([change], keeper.changes[change])
        yield changes
        yield CounterMetricFamily(
            PREFIX + "lease_rounds",
            "Lease rounds done (heartbeat, renewals, fair-share claims and releases).",
            value=keeper.rounds,
        )
