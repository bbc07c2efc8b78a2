"""The one place that builds the platform's services and wires them together.

The server (`api/main.py`) and `training-platform sync` both build them here,
so a sync started from the command line diagnoses, marks stalls and polls by
the same rules as the server's. Nothing here starts threads or tasks: the
server's lifespan starts the hub.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.formats.mlflow_store import stop_reading_ahead
from training_platform.ingest.host_files import HostFiles
from training_platform.ingest.lease_keeper import LeaseKeeper
from training_platform.ingest.polling import PollRule
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.stall import StallWatch
from training_platform.ingest.sync_service import SyncService
from training_platform.ingest.system_file import SYSTEM
from training_platform.live.cluster_link import ClusterLink
from training_platform.live.diagnostics import PlatformDiagnostics, anomaly_config
from training_platform.live.hub import LiveHub
from training_platform.live.pipeline import LivePipeline
from training_platform.live.sample_diagnostics import SampleDiagnostics
from training_platform.live.system_diagnostics import SystemDiagnostics
from training_platform.live.webhooks import WebhookNotifier
from training_platform.settings import Settings


@dataclass(frozen=True)
class Services:
    sync: SyncService
    poll_rule: PollRule
    pipeline: LivePipeline
    hub: LiveHub

    def close(self) -> None:
        """Close the readers (SSH connections) and the read-ahead worker; the hub is
        stopped by its owner first."""
        self.sync.close()
        stop_reading_ahead()
        if self.pipeline.cluster is not None:
            self.pipeline.cluster.close()


def build_services(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    serving: bool = False,
) -> Services:
    """The sync service, its listener (detectors, webhook), the poll rule and the hub.

    `clock` (Unix seconds) drives the stall watch and the detectors' timestamps,
    so tests move time instead of sleeping. `serving`: for a server process,
    which on PostgreSQL ingests only the jobs whose lease it holds
    (`ingest/lease_keeper.py`); a command-line sync ingests what it is asked.
    """
    diagnostics = sample_diagnostics = system_diagnostics = None
    if settings.diagnostics_enabled:
        sample_diagnostics = SampleDiagnostics(factory, clock=clock)
        system_diagnostics = SystemDiagnostics(factory, clock=clock)
        diagnostics = PlatformDiagnostics(
            factory,
            anomaly_config(settings),
            warmup_records=settings.diagnostics_warmup_records,
            clock=clock,
        )
    webhook = None
    if settings.webhook_url:
        webhook = WebhookNotifier(
            settings.webhook_url,
            secret=settings.webhook_secret,
            attempts=settings.webhook_attempts,
            timeout=settings.webhook_timeout,
            backoff=settings.webhook_backoff,
        )
    pipeline = LivePipeline(
        queue_size=settings.live_queue_size,
        max_message_bytes=settings.live_max_message_bytes,
        diagnostics=diagnostics,
        sample_diagnostics=sample_diagnostics,
        system_diagnostics=system_diagnostics,
        webhook=webhook,
        status_interval=settings.live_status_interval,
        factory=factory,
    )
    shared = factory.kw["bind"].dialect.name == "postgresql"
    if shared:
        # Other server processes may share this database (docs/live.md, "Several
        # processes"): announcements go through its outbox to all of them.
        pipeline.cluster = ClusterLink(
            factory,
            settings.database_url,
            render=pipeline.render,
            drop_clients=pipeline.drop_clients,
            watched=pipeline.watched_jobs,
            is_watched=pipeline.is_watched,
            retention=settings.live_outbox_retention,
        )
    stall = StallWatch(
        factor=settings.stall_factor, min_seconds=settings.stall_min_seconds, clock=clock
    )
    sync = SyncService(
        factory,
        settings,
        listener=pipeline,
        stall=stall,
        line_kinds=[SAMPLES, SYSTEM],
        host_files=HostFiles(),
        leases=LeaseKeeper(factory, period=settings.lease_seconds) if shared and serving else None,
    )
    if sync.leases is not None:
        sync.leases.quiesce = sync.exclusive
    poll_rule = PollRule(sync, settings)
    hub = LiveHub(factory, settings, sync, pipeline, poll_rule)
    return Services(sync=sync, poll_rule=poll_rule, pipeline=pipeline, hub=hub)
