"""A job's live channel: its subscribers, their bounded queues, the messages.

Every message is serialised once for all subscribers of a job and stamped
with the commit number it belongs to (`JobChannel.next_seq`, advanced under
the job's sync lock). A subscriber that falls `maxsize` messages behind is
dropped alone, told why, never slowing the sync or the other subscribers.

A client that asks for history first (`since_step`) is served by the hand-over
rule in `HandOver`: subscribe first, then read the history in pages (each page
together with the commit number it reflects, under the job's lock), then skip
every queued message that a page already contained. Delivery is exactly the
committed record versions, each once, in commit order.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

from training_platform.history.iso_time import iso_utc
from training_platform.store.job_flags import anomaly_of
from training_platform.store.models import STATUS_FIELDS, TERMINAL_STATUSES, Job

_STATUS_KEYS: Final = ("job_id", *STATUS_FIELDS)
# A change of one of these is announced at once; a change of the rest
# (`current_step`, `updated_at`: every step) is progress, coalesced.
_ANNOUNCED_KEYS: Final = ("status", "total_steps", "anomaly_detected", "anomaly_reason")
_ANOMALY_KEYS: Final = (
    "step", "type", "severity", "message", "source", "sources", "created_at", "evidence",
    "end_step",
)  # fmt: skip


class Message(NamedTuple):
    """One message for every subscriber of a job, serialised once."""

    seq: int  # the job's commit number it belongs to (see `HandOver`)
    kind: str  # "metric" | "anomaly" | "samples" | "system" | "status" | "finished"
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

    `data` also has `timestamp_iso`, the record's `timestamp` (Unix seconds,
    kept) as ISO 8601 UTC text (`history/iso_time.py`). A record whose message
    would exceed `max_bytes` goes out as its step and timestamps with
    ``"truncated": true``: the client fetches it over REST.
    """
    timestamp = record.get("timestamp")
    iso = iso_utc(timestamp)
    text = _dumps({"type": "metric", "data": {**record, "timestamp_iso": iso}})
    if len(text) > max_bytes:
        stub = {"step": record["step"], "timestamp": timestamp, "timestamp_iso": iso}
        text = _dumps({"type": "metric", "data": stub, "truncated": True})
    return Message(seq, "metric", record["step"], text)


def anomaly_message(seq: int, anomaly: dict[str, Any]) -> Message:
    """One incident: `sources` names every source that found it (see `merge_incidents`)."""
    data = {key: anomaly.get(key) for key in _ANOMALY_KEYS}
    data["sources"] = anomaly.get("sources") or [anomaly["source"]]
    return Message(seq, "anomaly", anomaly["step"], _dumps({"type": "anomaly", "data": data}))


def samples_message(seq: int, step: int, count: int) -> Message:
    """`count` samples of `step` landed: the client fetches them over REST if it shows them."""
    text = _dumps({"type": "samples", "step": step, "count": count})
    return Message(seq, "samples", step, text)


def system_message(seq: int, sample: dict[str, Any]) -> Message:
    """One host's system sample: `{"type": "system", "data": {timestamp, host, step, values}}`."""
    return Message(seq, "system", sample["step"], _dumps({"type": "system", "data": sample}))


def status_data(job: Job) -> dict[str, Any]:
    """The job's status in the status file's shape (platform may say "stalled"), its
    `anomaly_detected` and `anomaly_reason` either side's (store/job_flags.py), and
    what the trainer's status file itself says in `trainer_anomaly_detected`."""
    data = {key: getattr(job, key) for key in _STATUS_KEYS}
    data["trainer_anomaly_detected"] = bool(job.anomaly_detected)
    data["anomaly_detected"], data["anomaly_reason"] = anomaly_of(job)
    return data


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
