"""Live fan-out: what happens to a job's records once they are committed.

`LivePipeline` is the sync service's listener. For every committed batch (from
the background sync or `POST .../sync`, always under the job's lock, so in
commit order) it:

1. stamps the batch with the job's next commit number (`JobChannel.next_seq`);
2. serialises one message per record, once for all subscribers, and hands
   them to the event loop, which puts them on every subscriber's bounded
   queue: a full queue drops that subscriber alone (it is told why), never
   slows the sync or the other subscribers;
3. runs the platform's detectors (`PlatformDiagnostics`), announces new
   anomalies as messages and to the webhook, one per incident: what the
   callback and the platform both found at a (step, type) goes out once,
   naming both sources;
4. tells the stall watch that the file grew.

Status changes go out through `StatusCoalescer`: at once when the status,
total_steps or the anomaly flag or reason change, progress alone at most once per
`status_interval` per job.

A client that asks for history first (`since_step`) is served by the hand-over
rule in `HandOver`: subscribe first, then read the history in pages (each page
together with the commit number it reflects, under the job's lock), then skip
every queued message that a page already contained. Delivery is exactly the
committed record versions, each once, in commit order.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.core.diagnostics import PlatformDiagnostics
from training_platform.core.live_progress import StatusCoalescer
from training_platform.core.metric_rows import record_nonfinite_as_strings
from training_platform.core.metrics_query import merge_incidents
from training_platform.core.models import Job, TrainingMetric
from training_platform.core.stall import StallWatch
from training_platform.core.sync_service import STATUS_FIELDS, TERMINAL_STATUSES
from training_platform.core.webhooks import WebhookNotifier

logger = logging.getLogger(__name__)

STALLED: Final = "stalled"
_STATUS_KEYS: Final = ("job_id", *STATUS_FIELDS)
# A change of one of these is announced at once; a change of the rest
# (`current_step`, `updated_at`: every step) is progress, coalesced.
_ANNOUNCED_KEYS: Final = ("status", "total_steps", "anomaly_detected", "anomaly_reason")
_ANOMALY_KEYS: Final = ("step", "type", "severity", "message", "source", "sources", "created_at")


class Message(NamedTuple):
    """One message for every subscriber of a job, serialised once."""

    seq: int  # the job's commit number it belongs to (see `HandOver`)
    kind: str  # "metric" | "anomaly" | "status" | "finished"
    step: int | None
    text: str


@dataclass(frozen=True)
class Dropped:
    """Put on a subscriber's queue in place of what it could not keep up with."""

    reason: str


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def metric_message(seq: int, record: dict[str, Any], *, max_bytes: int) -> Message:
    """`{"type": "metric", "data": record}`; `record` must already be API-safe.

    A record whose message would exceed `max_bytes` goes out as its step and
    timestamp with ``"truncated": true``: the client fetches it over REST.
    """
    text = _dumps({"type": "metric", "data": record})
    if len(text) > max_bytes:
        stub = {"step": record["step"], "timestamp": record.get("timestamp")}
        text = _dumps({"type": "metric", "data": stub, "truncated": True})
    return Message(seq, "metric", record["step"], text)


def anomaly_message(seq: int, anomaly: dict[str, Any]) -> Message:
    """One incident: `sources` names every source that found it (see `merge_incidents`)."""
    data = {key: anomaly.get(key) for key in _ANOMALY_KEYS}
    data["sources"] = anomaly.get("sources") or [anomaly["source"]]
    return Message(seq, "anomaly", anomaly["step"], _dumps({"type": "anomaly", "data": data}))


def status_data(job: Job) -> dict[str, Any]:
    """The job's status in the status file's shape (platform may say "stalled")."""
    return {key: getattr(job, key) for key in _STATUS_KEYS}


def status_messages(seq: int, status: dict[str, Any]) -> list[Message]:
    """A status message, followed by `finished` when the status is terminal."""
    messages = [Message(seq, "status", None, _dumps({"type": "status", "data": status}))]
    if status["status"] in TERMINAL_STATUSES:
        text = _dumps({"type": "finished", "status": status["status"]})
        messages.append(Message(seq, "finished", None, text))
    return messages


class Subscription:
    """One client's place on a job's channel. Use on the event loop only.

    Batches are queued as published (shared by every subscriber, never
    copied); `pending` counts the messages not yet taken. A subscriber that
    still has `maxsize` messages pending when the next commit arrives is too
    far behind and is dropped. One commit larger than `maxsize` (a file caught
    up after a restart) is still accepted whole: it is the backlog that counts,
    not the burst.
    """

    def __init__(self, channel: JobChannel, maxsize: int) -> None:
        self.channel = channel
        self.maxsize = maxsize
        self.pending = 0
        self.dropped: str | None = None
        self._batches: asyncio.Queue[Sequence[Message] | Dropped] = asyncio.Queue()
        self._current: Sequence[Message] = ()
        self._index = 0

    def offer(self, messages: Sequence[Message]) -> bool:
        """Queue a batch; False when the subscriber was dropped instead."""
        if self.dropped is not None:
            return False
        if self.pending >= self.maxsize:
            self.drop(
                f"too slow: {self.pending} messages behind; reconnect with "
                "since_step=<last step received>"
            )
            return False
        self._batches.put_nowait(messages)
        self.pending += len(messages)
        return True

    async def get(self) -> Message | Dropped:
        """The next message, in publish order, or `Dropped` once dropped."""
        while self._index >= len(self._current):
            item = await self._batches.get()
            if isinstance(item, Dropped):
                return item
            self._current, self._index = item, 0
        message = self._current[self._index]
        self._index += 1
        self.pending -= 1
        return message

    def drop(self, reason: str) -> None:
        """Stop queueing for this subscriber; its reader gets `Dropped(reason)` next."""
        if self.dropped is not None:
            return
        self.dropped = reason
        self.channel.unsubscribe(self)
        while not self._batches.empty():  # nothing queued will be sent now
            self._batches.get_nowait()
        self._current, self._index, self.pending = (), 0, 0
        self._batches.put_nowait(Dropped(reason))

    def close(self) -> None:
        self.channel.unsubscribe(self)


class JobChannel:
    """A job's subscribers and its commit counter."""

    def __init__(self, job_id: str, queue_size: int) -> None:
        self.job_id = job_id
        self.queue_size = queue_size
        self.seq = 0  # advanced only under the job's sync lock
        self._subscribers: set[Subscription] = set()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def subscribe(self) -> Subscription:
        subscription = Subscription(self, self.queue_size)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscribers.discard(subscription)

    def publish(self, messages: Sequence[Message]) -> None:
        """Queue `messages` for every subscriber (event loop only; never blocks)."""
        for subscription in list(self._subscribers):
            subscription.offer(messages)

    def drop_all(self, reason: str) -> None:
        """Disconnect every subscriber, e.g. the job was deleted (event loop only)."""
        for subscription in list(self._subscribers):
            subscription.drop(reason)


class HandOver:
    """Which queued messages a client already got from its history pages.

    History is read in pages, each with the commit number `seq` it reflects.
    The pages cover the step axis in order: the first from minus infinity (the
    steps up to `since_step`, which the client says it has) to its last step,
    the last one up to infinity. A queued metric message is a duplicate when
    the page covering its step already reflected its commit (`seq <= page
    seq`); a later commit of the same step (a rewrite) is a new version and is
    sent. A status message is a duplicate when the status sent at connection
    time already reflected it.
    """

    def __init__(self, status_seq: int) -> None:
        self.status_seq = status_seq
        self._uppers: list[float] = []
        self._seqs: list[int] = []

    def add_page(self, last_step: float, seq: int) -> None:
        """A page covering steps up to `last_step` (math.inf for the last page)."""
        self._uppers.append(last_step)
        self._seqs.append(seq)

    def already_sent(self, message: Message) -> bool:
        if message.kind == "status" or message.kind == "finished":
            return message.seq <= self.status_seq
        if message.kind != "metric" or not self._uppers or message.step is None:
            return False
        index = bisect.bisect_left(self._uppers, message.step)
        if index == len(self._uppers):
            return False
        return message.seq <= self._seqs[index]


class LivePipeline:
    """The sync service's listener: fan-out, diagnosis, webhook, stall marking.

    Hooks run in sync worker threads; messages reach subscribers through the
    event loop given to `attach`. Without a loop (the CLI) nothing is fanned
    out, but diagnosis and stall marking still happen.
    """

    def __init__(
        self,
        *,
        queue_size: int,
        max_message_bytes: int,
        diagnostics: PlatformDiagnostics | None,
        stall: StallWatch,
        webhook: WebhookNotifier | None = None,
        status_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue_size = queue_size
        self.max_message_bytes = max_message_bytes
        self.diagnostics = diagnostics
        self.stall = stall
        self.webhook = webhook
        self._channels: dict[str, JobChannel] = {}
        self._announced: dict[str, tuple[Any, ...]] = {}
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.statuses = StatusCoalescer(status_interval, clock)

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Fan out on `loop` from now on; None stops (call it on the old loop)."""
        if loop is None:
            self.statuses.cancel()
        self._loop = loop

    def channel(self, job_id: str) -> JobChannel:
        # Channels are never removed: a subscriber holds on to its channel, and
        # a new one for the same job would restart the commit numbers under it.
        with self._guard:
            channel = self._channels.get(job_id)
            if channel is None:
                channel = self._channels[job_id] = JobChannel(job_id, self.queue_size)
            return channel

    # -- SyncListener hooks (worker threads, under the job's sync lock) --------

    def records_committed(self, job_id: str, records: list[dict[str, Any]]) -> None:
        channel = self.channel(job_id)
        seq = channel.next_seq()
        self.stall.note_records(job_id, records)
        if channel.subscriber_count:
            limit = self.max_message_bytes
            messages = [
                metric_message(seq, record_nonfinite_as_strings(record), max_bytes=limit)
                for record in records
            ]
            self._deliver(channel, messages)
        anomalies = list(_callback_anomalies(job_id, records))
        if self.diagnostics is not None:
            anomalies += self.diagnostics.diagnose(job_id, records)
        if not anomalies:
            return
        # The platform diagnoses the very records that carry the callback's
        # findings, so both sources of an incident are in this batch: merged
        # here, it goes out once, and never as a second message later.
        incidents = merge_incidents(anomalies)
        if channel.subscriber_count:
            self._deliver(channel, [anomaly_message(seq, incident) for incident in incidents])
        if self.webhook is not None:
            for incident in incidents:
                self.webhook.notify({"event": "anomaly", "job_id": job_id, **incident})

    def review_status(self, session: Session, job: Job) -> None:
        job_id = job.job_id
        if not self.stall.is_primed(job_id):
            self._prime_stall(session, job)
        self.stall.note_status(job_id, job.updated_at)
        # The status file knows nothing of "stalled": it keeps saying running.
        stalled = False
        if job.status in ("running", STALLED):
            stalled = self.stall.is_stalled(job_id)
            job.status = STALLED if stalled else "running"
        # Logged at the transitions only, not on every sync of a silent run.
        if self.stall.report(job_id, stalled=stalled):
            if stalled:
                logger.warning(
                    "job %s is stalled: its metrics file has not grown for %.0f s",
                    job_id,
                    self.stall.silent_for(job_id) or 0.0,
                )
            else:
                logger.info("job %s is no longer stalled (now %s)", job_id, job.status)

    def status_changed(self, job: Job) -> None:
        status = status_data(job)
        key = tuple(status[name] for name in _ANNOUNCED_KEYS)
        with self._guard:
            urgent = self._announced.get(job.job_id) != key
            self._announced[job.job_id] = key
        channel = self.channel(job.job_id)
        seq = channel.next_seq()
        if not channel.subscriber_count:
            return  # a later subscriber gets the current status when it connects
        send = self.statuses.announce if urgent else self.statuses.progress
        self._schedule(send, channel, status_messages(seq, status))

    # -- helpers ---------------------------------------------------------------

    def _deliver(self, channel: JobChannel, messages: list[Message]) -> None:
        if messages:
            self._schedule(JobChannel.publish, channel, messages)

    def _schedule(
        self,
        send: Callable[[JobChannel, Sequence[Message]], None],
        channel: JobChannel,
        messages: Sequence[Message],
    ) -> None:
        loop = self._loop
        if loop is None:
            return
        # FIFO: calls scheduled from one thread run in order, and one job's
        # hooks only ever run one at a time, so commit order is kept. A loop
        # closed under us (server shutting down) has nobody left to tell.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(send, channel, messages)

    def _prime_stall(self, session: Session, job: Job) -> None:
        newest = session.scalar(
            select(func.max(TrainingMetric.received_at)).where(TrainingMetric.job_id == job.job_id)
        )
        timestamps = session.scalars(
            select(TrainingMetric.timestamp)
            .where(TrainingMetric.job_id == job.job_id)
            .order_by(TrainingMetric.step.desc())
            .limit(33)
        ).all()
        last_growth = newest if newest is not None else job.created_at
        self.stall.prime(
            job.job_id,
            last_growth=last_growth if last_growth is not None else self.stall.clock(),
            timestamps=[t for t in reversed(timestamps) if t is not None and math.isfinite(t)],
        )


def _callback_anomalies(job_id: str, records: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """The anomalies the trainer's callback reported in `records` (stored by the persister)."""
    now = time.time()
    for record in records:
        for anomaly in record.get("anomalies") or ():
            yield {
                "job_id": job_id,
                "step": record["step"],
                "type": anomaly["type"],
                "severity": anomaly["severity"],
                "message": anomaly["message"],
                "source": "callback",
                "created_at": now,
            }
