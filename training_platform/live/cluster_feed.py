"""Cross-process live: each job's numbered announcements, delivered in order, once.

With several server processes on one PostgreSQL database (DESIGN.md §9),
whichever process ingests a batch numbers it in its transaction
(`store/live_outbox.py`); every process that has live clients of the job
delivers the numbers it has not delivered yet, in order, from the outbox.
Three ways reach the same `catch_up`, so none is load-bearing alone:

- the ingesting process hands over what it just committed (`announce`), no
  read needed when it is the next number;
- a notification from another process (`live/pg_notifications.py`) names
  the job and its newest number;
- a sweep every second compares each watched job's `jobs.live_seq` with what
  was delivered: a notification lost, late, or sent while the listening
  connection was down costs at most that second, never a record.

A job starts being tracked just before its first client here subscribes,
from the job's number at that moment: everything numbered after it reaches
the client (the client's history hand-over covers what came before,
`channels.HandOver`). Numbers pruned from the outbox before a slow
process delivered them are a gap: that job's clients are told to reconnect
(they resume from their last step), never silently skipped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Final

from sqlalchemy.orm import Session, sessionmaker

from training_platform.store.live_outbox import OutboxEntry, latest_seq, read_outbox

logger = logging.getLogger(__name__)

PAGE: Final = 200  # announcements read at a time


class ClusterFeed:
    """Per process: the last number delivered per tracked job, and the way to the next.

    `publish(job_id, entry)` renders an announcement to this process's clients
    (never blocks); `gap(job_id)` tells them they missed some. Both are called
    under the job's lock, in number order. `watched(job_id)`: whether the job
    has clients here (one without is only noted, never read back).
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        publish: Callable[[str, OutboxEntry], None],
        gap: Callable[[str], None],
        watched: Callable[[str], bool],
    ) -> None:
        self._factory = factory
        self._publish = publish
        self._gap = gap
        self._watched = watched
        self._delivered: dict[str, int] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, job_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def delivered(self, job_id: str) -> int | None:
        with self._guard:
            return self._delivered.get(job_id)

    def track(self, job_id: str) -> None:
        """A client of `job_id` is about to subscribe here. Without clients yet, the
        job is delivered from its current number on (what came before is the
        client's history); with some, delivery goes on where it is (jumping
        ahead would skip numbers they have not had yet)."""
        with self._lock(job_id):
            if self._watched(job_id) and self.delivered(job_id) is not None:
                return
            with self._factory() as session:
                current = latest_seq(session, [job_id]).get(job_id, 0)
            with self._guard:
                self._delivered[job_id] = max(self._delivered.get(job_id, 0), current)

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._delivered.pop(job_id, None)

    def announce(self, job_id: str, entry: OutboxEntry) -> None:
        """This process committed `entry`: deliver it, after any earlier one missing."""
        with self._lock(job_id):
            done = self.delivered(job_id)
            if done is None or not self._watched(job_id):
                # No client here: nothing to catch up; a first one starts from
                # the job's number then (`track`).
                self._set(job_id, max(entry.seq, done or 0))
                return
            if entry.seq <= done:
                return  # a notification or the sweep delivered it first
            if entry.seq > done + 1:
                done = self._catch_up_locked(job_id, done, entry.seq - 1)
            if entry.seq == done + 1:
                self._publish(job_id, entry)
                self._set(job_id, entry.seq)

    def catch_up(self, job_id: str, upto: int | None = None) -> None:
        """Deliver the tracked job's announcements after the last one delivered
        (up to `upto` when given, else all there are)."""
        with self._lock(job_id):
            done = self.delivered(job_id)
            if done is None or (upto is not None and upto <= done):
                return
            self._catch_up_locked(job_id, done, upto)

    def sweep(self, job_ids: Iterable[str]) -> None:
        """Catch up every job of `job_ids` whose number moved past what was delivered."""
        tracked = [job_id for job_id in job_ids if self.delivered(job_id) is not None]
        if not tracked:
            return
        with self._factory() as session:
            latest = latest_seq(session, tracked)
        for job_id, seq in latest.items():
            done = self.delivered(job_id)
            if done is not None and seq > done:
                self.catch_up(job_id, seq)

    def _catch_up_locked(self, job_id: str, done: int, upto: int | None) -> int:
        while upto is None or done < upto:
            with self._factory() as session:
                entries = read_outbox(session, job_id, done, PAGE)
            if not entries:
                break
            if entries[0].seq != done + 1:
                # Pruned before this process got to them: its clients must
                # resume from their own position rather than skip them.
                logger.warning(
                    "live announcements %d-%d of %s are gone from the outbox: "
                    "its clients here reconnect",
                    done + 1,
                    entries[0].seq - 1,
                    job_id,
                )
                self._gap(job_id)
                done = entries[-1].seq
                self._set(job_id, done)
                break
            for entry in entries:
                if upto is not None and entry.seq > upto:
                    break
                self._publish(job_id, entry)
                done = entry.seq
            self._set(job_id, done)
            if len(entries) < PAGE:
                break
        return done

    def _set(self, job_id: str, seq: int) -> None:
        with self._guard:
            self._delivered[job_id] = seq
