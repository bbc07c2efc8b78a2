"""What a server process does when other processes share its PostgreSQL database.

`LivePipeline` hands every announcement here instead of numbering it itself:
it is numbered in the outbox (by the persister, in the batch's transaction,
or here in a transaction of its own for what is found after the commit:
anomalies, a status change, a verl rollout file), delivered to this
process's clients in number order (`ClusterFeed`) and notified to the other
processes (`pg_notifications.py`), whose feeds deliver it to theirs. A
client's history hand-over reads the job's number and its records in one
snapshot (REPEATABLE READ), so the numbers it skips are exactly the ones its
history already held. Old outbox rows are pruned here too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.schema import MAX_STEP
from training_platform.history.metrics_query import list_metrics
from training_platform.ingest.persister import outbox_payload
from training_platform.live.channels import status_data
from training_platform.live.cluster_feed import ClusterFeed
from training_platform.live.pg_notifications import Listener, Notifier
from training_platform.store.live_outbox import (
    OutboxEntry,
    append_outbox,
    latest_seq,
    prune_outbox,
)
from training_platform.store.models import Job

logger = logging.getLogger(__name__)

PRUNE_EVERY_S: Final = 60.0
GAP_REASON: Final = "this server fell behind the live stream: reconnect to resume"


class ClusterLink:
    def __init__(
        self,
        factory: sessionmaker[Session],
        database_url: str,
        *,
        render: Callable[[str, OutboxEntry], None],
        drop_clients: Callable[[str, str], None],
        watched: Callable[[], list[str]],
        is_watched: Callable[[str], bool],
        retention: float,
        sweep_interval: float = 1.0,
    ) -> None:
        self._factory = factory
        self._watched = watched
        self._is_watched = is_watched
        self.retention = retention
        self.feed = ClusterFeed(
            factory,
            render,
            gap=lambda job_id: drop_clients(job_id, GAP_REASON),
            watched=is_watched,
        )
        self.notifier = Notifier(database_url)
        self.listener = Listener(database_url, self._notified, self._tick, tick=sweep_interval)
        self._next_prune = 0.0

    def start(self) -> None:
        self.listener.start()

    def close(self) -> None:
        self.listener.stop()
        self.notifier.close()

    def emit(self, job_id: str, kind: str, payload: dict[str, Any], seq: int | None) -> int:
        """Number `payload` (unless the persister did: `seq`), deliver it here, tell the others."""
        if seq is None:
            stored = payload
            if "records" in payload:  # a batch the persister did not number (none today)
                stored = outbox_payload(kind, payload["records"], [])
            with self._factory.begin() as session:
                seq = append_outbox(session, job_id, kind, stored)
        self.feed.announce(job_id, OutboxEntry(seq, kind, payload))
        self.notifier.notify(job_id, seq)
        return seq

    def status_snapshot(self, job_id: str) -> tuple[dict[str, Any] | None, int]:
        """The job's status and the number it reflects, read in one snapshot."""
        with self._factory() as session:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            job = session.get(Job, job_id)
            if job is None:
                return None, 0
            return status_data(job), int(job.live_seq)

    def history_snapshot(
        self, job_id: str, after_step: int, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Up to `limit` stored records after `after_step` and the number they reflect,
        read in one snapshot: every announcement up to it is in the page, none after."""
        with self._factory() as session:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            seq = latest_seq(session, [job_id]).get(job_id, 0)
            if after_step >= MAX_STEP:
                return [], seq
            records = list_metrics(
                session,
                job_id=job_id,
                start_step=after_step + 1,
                limit=limit,
                nonfinite_as_strings=True,
            )
            return records, seq

    # -- the listener thread ---------------------------------------------------

    def _notified(self, job_id: str, seq: int) -> None:
        if self._is_watched(job_id):
            self.feed.catch_up(job_id, seq)

    def _tick(self) -> None:
        self.feed.sweep(self._watched())
        now = time.time()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_S
            with self._factory.begin() as session:
                pruned = prune_outbox(session, now - self.retention)
            if pruned:
                logger.debug("pruned %d live announcements older than %g s", pruned, self.retention)
