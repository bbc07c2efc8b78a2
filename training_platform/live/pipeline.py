"""Live fan-out: what happens to a job's rows once they are committed.

`LivePipeline` is the sync service's listener. For every committed batch (from
the background sync or `POST .../sync`, always under the job's lock, so in
commit order) it:

1. stamps the batch with the job's next commit number (`JobChannel.next_seq`);
2. serialises one message per record, once for all subscribers, and hands
   them to the event loop, which puts them on every subscriber's bounded
   queue (live/channels.py);
3. runs the platform's detectors (`PlatformDiagnostics`) and announces the
   anomalies, as messages and to the webhook, one per incident: the rows the
   persister wrote for the callback's findings and the ones the platform
   found at the same (step, type) go out once, naming both sources. The
   metric messages' records still carry the callback's findings (the record's
   shape), but the page takes anomalies from the anomaly messages only.

Status changes go out through `StatusCoalescer`: at once when the status,
total_steps or the anomaly flag or reason change, progress alone at most once per
`status_interval` per job. The pipeline only listens: the stalled verdict is
stored by the sync service before it is announced here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.orm import Session, sessionmaker

from training_platform.history.incidents import merge_incidents
from training_platform.ingest.metrics_file import METRICS
from training_platform.ingest.persister import CommittedBatch
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.system_file import SYSTEM
from training_platform.ingest.system_lines import system_message_data
from training_platform.live.channels import (
    JobChannel,
    Message,
    anomaly_message,
    metric_message,
    samples_message,
    status_data,
    status_messages,
    system_message,
)
from training_platform.live.diagnostics import PlatformDiagnostics
from training_platform.live.sample_diagnostics import SampleDiagnostics
from training_platform.live.status_coalescer import StatusCoalescer
from training_platform.live.system_diagnostics import SystemDiagnostics
from training_platform.live.webhooks import WebhookNotifier
from training_platform.store.job_flags import JobFlags, incident_reason
from training_platform.store.live_outbox import OutboxEntry
from training_platform.store.metric_rows import record_nonfinite_as_strings
from training_platform.store.models import Job

if TYPE_CHECKING:
    from training_platform.live.cluster_link import ClusterLink

# A change of one of these is announced at once; a change of the rest
# (`current_step`, `updated_at`: every step) is progress, coalesced.
_ANNOUNCED_KEYS: Final = ("status", "total_steps", "anomaly_detected", "anomaly_reason")
# Kinds of announcement besides the file kinds' ("metrics", "samples").
ANOMALIES: Final = "anomalies"
STATUS: Final = "status"


class LivePipeline:
    """The sync service's listener: fan-out, diagnosis, webhook.

    Hooks run in sync worker threads; messages reach subscribers through the
    event loop given to `attach`. Without a loop (the CLI) nothing is fanned
    out, but diagnosis still happens.
    """

    def __init__(
        self,
        *,
        queue_size: int,
        max_message_bytes: int,
        diagnostics: PlatformDiagnostics | None,
        sample_diagnostics: SampleDiagnostics | None = None,
        system_diagnostics: SystemDiagnostics | None = None,
        webhook: WebhookNotifier | None = None,
        status_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        factory: sessionmaker[Session] | None = None,
    ) -> None:
        self.queue_size = queue_size
        self.max_message_bytes = max_message_bytes
        self.diagnostics = diagnostics
        self.sample_diagnostics = sample_diagnostics
        self.system_diagnostics = system_diagnostics
        self.webhook = webhook
        # Where a job's first critical incident is kept, and that the webhook was told
        # (store/job_flags.py); None (some tests): neither.
        self.flags = None if factory is None else JobFlags(factory)
        self._flagged: set[str] = set()  # jobs known to have an incident: no UPDATE again
        self._alerted: set[str] = set()  # jobs whose flag the webhook knows of
        self._channels: dict[str, JobChannel] = {}
        self._announced: dict[str, tuple[Any, ...]] = {}
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.statuses = StatusCoalescer(status_interval, clock)
        # Set when other server processes share the database (live/cluster_link.py).
        self.cluster: ClusterLink | None = None

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

    def is_watched(self, job_id: str) -> bool:
        """Whether the job has live clients in this process (one dict lookup)."""
        with self._guard:
            channel = self._channels.get(job_id)
        return channel is not None and channel.subscriber_count > 0

    def watched_jobs(self) -> list[str]:
        """The jobs with live clients in this process."""
        with self._guard:
            channels = list(self._channels.values())
        return [channel.job_id for channel in channels if channel.subscriber_count]

    def forget(self, job_id: str) -> None:
        """A deleted job: one registered again under its id starts unflagged."""
        with self._guard:
            self._flagged.discard(job_id)
            self._alerted.discard(job_id)
            self._announced.pop(job_id, None)

    # -- SyncListener hooks (worker threads, under the job's sync lock) --------

    def batch_committed(self, job_id: str, batch: CommittedBatch) -> None:
        if batch.kind == SAMPLES.name:
            self._samples_committed(job_id, batch)
            return
        if batch.kind == SYSTEM.name:
            samples = [system_message_data(sample) for sample in batch.records]
            seq = self._emit(job_id, SYSTEM.name, {"samples": samples}, seq=batch.seq)
            if self.system_diagnostics is not None:
                self._announce(job_id, seq, self.system_diagnostics.diagnose(job_id, samples))
            return
        if batch.kind != METRICS.name:
            return  # a kind of file nothing live is made of
        records = batch.records
        seq = self._emit(job_id, METRICS.name, {"records": records}, seq=batch.seq)
        anomalies = list(batch.anomalies)
        if self.diagnostics is not None:
            anomalies += self.diagnostics.diagnose(job_id, records)
        if self.system_diagnostics is not None:  # a host whose sampler went quiet
            anomalies += self.system_diagnostics.records_landed(job_id, records)
        # The platform diagnoses the very records that carry the callback's
        # findings, so both sources of an incident are in this batch: merged
        # here, it goes out once, and never as a second message later.
        self._announce(job_id, seq, anomalies)

    def _announce(self, job_id: str, seq: int, anomalies: list[dict[str, Any]]) -> None:
        """One `anomaly` message and one webhook POST per incident."""
        if not anomalies:
            return
        incidents = merge_incidents(anomalies)
        self._emit(job_id, ANOMALIES, {"incidents": incidents}, seq=None if self.cluster else seq)
        if self.webhook is not None:
            for incident in incidents:
                self.webhook.notify({"event": "anomaly", "job_id": job_id, **incident})
        critical = [incident for incident in incidents if incident["severity"] == "critical"]
        if critical:
            self._flag(job_id, min(critical, key=lambda incident: incident["step"]))

    def _flag(self, job_id: str, incident: dict[str, Any]) -> None:
        """Mark the job with its first critical incident, and say so (once)."""
        with self._guard:
            if self.flags is None or job_id in self._flagged:
                return
            self._flagged.add(job_id)
        job = self.flags.critical(job_id, incident_reason(incident))
        if job is not None:  # this call set it: the job's anomaly flag may have turned
            self.status_changed(job)

    def _samples_committed(self, job_id: str, batch: CommittedBatch) -> None:
        """One `samples` message per step whose samples landed, in step order, then
        what the sample detectors found in them (new findings only)."""
        steps = sorted(Counter(sample["step"] for sample in batch.records).items())
        seq = self._emit(job_id, SAMPLES.name, {"steps": steps}, seq=batch.seq)
        if self.sample_diagnostics is not None:
            self._announce(job_id, seq, self.sample_diagnostics.diagnose(job_id, batch.records))

    def status_changed(self, job: Job) -> None:
        """Announce the job's status; the webhook hears `job_anomaly` once per job,
        when its `anomaly_detected` is first announced true."""
        status = status_data(job)
        key = tuple(status[name] for name in _ANNOUNCED_KEYS)
        with self._guard:
            urgent = self._announced.get(job.job_id) != key
            self._announced[job.job_id] = key
            alert = status["anomaly_detected"] and job.job_id not in self._alerted
            if alert:
                self._alerted.add(job.job_id)
        self._emit(job.job_id, STATUS, {"status": status, "urgent": urgent})
        told = alert and self.flags is not None and self.flags.first_alert(job.job_id)
        if told and self.webhook is not None:
            fields = ("status", "current_step", "anomaly_reason", "trainer_anomaly_detected")
            self.webhook.notify({"event": "job_anomaly", "job_id": job.job_id,
                                 "anomaly_detected": True,
                                 **{name: status[name] for name in fields}})  # fmt: skip

    # -- announcing: here, or through the outbox to every process --------------

    def _emit(
        self, job_id: str, kind: str, payload: dict[str, Any], *, seq: int | None = None
    ) -> int:
        """Announce `payload`; its number.

        One process: numbered by the job's channel (or `seq`, the number of the
        batch it belongs to) and published here. Several processes on one
        database (`cluster`): numbered in the outbox (`seq` when the persister
        already did, in the batch's transaction), delivered here in number
        order and notified to the others (docs/live.md, "Several processes").
        """
        if self.cluster is None:
            number = self.channel(job_id).next_seq() if seq is None else seq
            self.render(job_id, OutboxEntry(number, kind, payload))
            return number
        number = self.cluster.emit(job_id, kind, payload, seq)
        channel = self.channel(job_id)
        channel.seq = max(channel.seq, number)  # the latest this process committed
        return number

    def render(self, job_id: str, entry: OutboxEntry) -> None:
        """Publish one announcement to this process's clients of the job (never blocks)."""
        channel = self.channel(job_id)
        if not channel.subscriber_count:
            return  # a later subscriber gets history and status when it connects
        seq, payload = entry.seq, entry.payload
        if entry.kind == METRICS.name:
            limit = self.max_message_bytes
            messages = [
                metric_message(seq, record_nonfinite_as_strings(record), max_bytes=limit)
                for record in payload["records"]
            ]
            self._deliver(channel, messages)
        elif entry.kind == ANOMALIES:
            self._deliver(channel, [anomaly_message(seq, i) for i in payload["incidents"]])
        elif entry.kind == SAMPLES.name:
            steps = payload["steps"]
            self._deliver(channel, [samples_message(seq, step, count) for step, count in steps])
        elif entry.kind == SYSTEM.name:
            self._deliver(channel, [system_message(seq, sample) for sample in payload["samples"]])
        elif entry.kind == STATUS:
            send = self.statuses.announce if payload["urgent"] else self.statuses.progress
            self._schedule(send, channel, status_messages(seq, payload["status"]))

    def drop_clients(self, job_id: str, reason: str) -> None:
        """Disconnect the job's clients here (they reconnect and resume from their step)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.channel(job_id).drop_all, reason)

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
