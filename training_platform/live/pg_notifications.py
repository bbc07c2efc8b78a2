"""PostgreSQL LISTEN/NOTIFY between server processes: "job J has announcement N".

Each process keeps two dedicated connections of its own (libpq through
psycopg, outside SQLAlchemy's pool: a pooled connection would be handed to a
request and its LISTEN lost): one that only listens, in a thread, and one
that sends. A notification is sent after the transaction that numbered the
announcement has committed, never inside it (NOTIFY in a transaction
serialises every such commit on a global lock). It is only a wake-up call:
the outbox holds what is announced and the feed's sweep catches up whatever a
lost notification did not (`live/cluster_feed.py`), so sending is best
effort and a listening connection that drops is reopened with backoff.

Payload: ``"<job_id> <seq>"``. A malformed one, or one naming a job this
process does not watch, is ignored (a malformed one logged once).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Final

import psycopg
from sqlalchemy.engine import make_url

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN

logger = logging.getLogger(__name__)

CHANNEL: Final = "training_platform_live"
_RECONNECT_MAX_S: Final = 5.0


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as psycopg wants it (no "+psycopg" driver part)."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def parse_payload(payload: str) -> tuple[str, int] | None:
    """(job_id, seq) from a notification's payload, or None when it is not one."""
    job_id, _, seq = payload.partition(" ")
    if not JOB_ID_PATTERN.fullmatch(job_id) or not seq.isdigit():
        return None
    return job_id, int(seq)


class Notifier:
    """Sends notifications on its own connection (thread-safe, best effort)."""

    def __init__(self, database_url: str) -> None:
        self._url = libpq_url(database_url)
        self._connection: psycopg.Connection[tuple[object, ...]] | None = None
        self._lock = threading.Lock()
        self._failing = False

    def notify(self, job_id: str, seq: int) -> None:
        with self._lock:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = psycopg.connect(self._url, autocommit=True)
                self._connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{job_id} {seq}"))
                if self._failing:
                    logger.info("live notifications are sent again")
                self._failing = False
            except psycopg.Error as exc:
                # The other processes' sweep delivers it within a second anyway.
                if not self._failing:
                    logger.warning("live notification not sent (%s): other processes sweep", exc)
                self._failing = True
                self._close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
            self._connection = None


class Listener:
    """A thread listening on its own connection; `on_notify(job_id, seq)` for each
    notification, `on_tick()` about every `tick` seconds (the feed's sweep), and
    `on_tick()` at once after each (re)connection (whatever was missed meanwhile)."""

    def __init__(
        self,
        database_url: str,
        on_notify: Callable[[str, int], None],
        on_tick: Callable[[], None],
        *,
        tick: float = 1.0,
    ) -> None:
        self._url = libpq_url(database_url)
        self._on_notify = on_notify
        self._on_tick = on_tick
        self._tick = tick
        self._stopping = threading.Event()
        self._warned_payload = False
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="live-listener", daemon=True)
        # This listener's own channel, only for `stop` to wake it (an identifier).
        self._wake_channel = f"{CHANNEL}_wake_{secrets.token_hex(6)}"

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.ident is not None:  # started
            self._wake()
            self._thread.join(timeout)

    def _wake(self) -> None:
        """Wake the thread out of its wait for notifications, so that stopping takes a
        round trip rather than up to a tick (a notification on its own channel)."""
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self._url, autocommit=True, connect_timeout=2) as connection,
        ):
            connection.execute(f"NOTIFY {self._wake_channel}")

    def _run(self) -> None:
        delay = 0.1
        lost = False  # logged once per outage, not at every try to reconnect
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    connection.execute(f"LISTEN {self._wake_channel}")
                    delay = 0.1
                    if lost:
                        logger.info("live listener reconnected")
                    lost = False
                    self._safely(self._on_tick)  # whatever came while not listening
                    self._listen(connection)
            except psycopg.Error as exc:
                if not lost:
                    logger.warning("live listener lost its connection (%s); reconnecting", exc)
                lost = True
                self._stopping.wait(delay)
                delay = min(_RECONNECT_MAX_S, delay * 2)

    def _listen(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        next_tick = time.monotonic() + self._tick
        while not self._stopping.is_set():
            wait = max(0.0, next_tick - time.monotonic())
            for notification in connection.notifies(timeout=wait):
                if notification.channel == self._wake_channel:
                    break  # `stop`: the loop's condition says so
                parsed = parse_payload(notification.payload)
                if parsed is None:
                    if not self._warned_payload:
                        payload = notification.payload
                        logger.warning("ignored a malformed live notification %r", payload)
                        self._warned_payload = True
                    continue
                self._safely(self._on_notify, *parsed)
            if time.monotonic() >= next_tick:
                self._safely(self._on_tick)
                next_tick = time.monotonic() + self._tick

    def _safely(self, call: Callable[..., None], *args: object) -> None:
        try:
            call(*args)
        except Exception:  # a delivery bug must not stop the listening
            if not self._failing:  # once per streak: a database that is down fails each tick
                logger.exception("live delivery from the outbox failed")
            self._failing = True
        else:
            self._failing = False
