"""One ingesting process per job: this process's heartbeat and its leases.

Several server processes on one PostgreSQL database (DESIGN.md §9) would all
ingest every job otherwise: rows stay exactly once (the offset
compare-and-swap), but work is done N times and the detectors of every
process see a different part of each run. So each process heartbeats a
`server_instances` row and holds leases (`store/leases.py`):

- A **round** (every third of `PLATFORM_LEASE_SECONDS`, from the hub) beats,
  renews every lease this process holds, and claims or releases leases so
  that every live process holds its fair share (`ingest/lease_plan.py`).
- A lease not renewed for a period expires: a process killed with SIGKILL,
  stopped, or cut off from the database loses its jobs to the others within
  one period and one round. A process on this host whose pid is gone loses
  them at once. A process that stops cleanly releases them as it goes.
- Every sync of a held job writes under its `Fence` (holder, token): a holder
  that lost its lease cannot commit, even if it does not know yet.
- A job this process has not seen held by a live other (a new job, a file
  event) is claimed on the spot when free (`fence_for`), so a new run is
  ingested at once, not a round later; the rounds even the load out after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Final

import psutil
from sqlalchemy.orm import Session, sessionmaker

from training_platform import __version__
from training_platform.errors import JobNotFoundError
from training_platform.ingest.lease_plan import plan_round
from training_platform.store import leases as lease_store
from training_platform.store.cluster_models import IngestLease, ServerInstance
from training_platform.store.leases import Fence

logger = logging.getLogger(__name__)

ROUNDS_PER_PERIOD: Final = 3
"""Renewals per lease period: a lease survives two missed rounds."""
PRUNE_AFTER_PERIODS: Final = 60
"""An instance silent this many periods is deleted from `server_instances`."""


@dataclass(frozen=True)
class Identity:
    """Who this process is in `server_instances`."""

    instance_id: str
    hostname: str
    pid: int
    version: str

    @classmethod
    def of_this_process(cls) -> Identity:
        hostname = socket.gethostname()[:255]
        pid = os.getpid()
        # "where:pid:nonce": `where` says in which pid namespace the pid means
        # something (see `_gone_from_this_host`); the nonce makes a restarted
        # process that reuses a pid a new holder.
        instance_id = f"{_pid_scope(hostname)}:{pid}:{secrets.token_hex(4)}"
        return cls(instance_id, hostname, pid, __version__)

    @property
    def scope(self) -> str:
        return scope_of(self.instance_id)


def _pid_scope(hostname: str) -> str:
    """This host and pid namespace: two containers may share a hostname
    (network_mode: host) while the same pid names different processes in each."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # not Linux: no pid namespaces
        namespace = 0
    return f"{hostname[:32]}/{namespace}"


def scope_of(instance_id: str) -> str:
    return instance_id.rsplit(":", 2)[0]


def pid_is_running(pid: int) -> bool:
    """Whether `pid` names a live process here; a zombie (killed, not yet reaped by
    its parent) is not one: it will never renew a lease again."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # someone else's process: it exists
        return True


class LeaseKeeper:
    """This process's leases; `round` from one thread at a time, the rest from any."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        period: float,
        identity: Identity | None = None,
    ) -> None:
        self._factory = factory
        self.period = period
        self.identity = identity or Identity.of_this_process()
        # Holding a job's lock while its lease is given up (SyncService.exclusive),
        # so no sync of it is half-way when another process takes it.
        self.quiesce: Callable[[str], AbstractContextManager[None]] = lambda _job_id: (
            contextlib.nullcontext()
        )
        self._held: dict[str, int] = {}  # job id -> token of this process's grant
        self._others: dict[str, str] = {}  # job id -> its live holder, as of the last round
        self._guard = threading.Lock()
        self.changes: Counter[str] = Counter()  # "claimed", "released", "lost"
        self.rounds = 0

    @property
    def instance_id(self) -> str:
        return self.identity.instance_id

    @property
    def round_interval(self) -> float:
        return self.period / ROUNDS_PER_PERIOD

    def held(self) -> dict[str, int]:
        with self._guard:
            return dict(self._held)

    def fence_for(self, job_id: str, *, discover: Callable[[], bool]) -> Fence | None:
        """The fence to sync `job_id` under, claiming a free lease on the spot; None
        when another live process holds it (then no statement is issued).

        A job with no lease row yet may be one whose files just appeared:
        `discover()` registers it (False: no such job, `JobNotFoundError`).
        """
        with self._guard:
            token = self._held.get(job_id)
            if token is None and job_id in self._others:
                return None
        if token is None:
            token = self._claim_now(job_id)
            if token is None and not self._has_lease_row(job_id):
                if not discover():
                    raise JobNotFoundError(f"job {job_id!r} not found")
                token = self._claim_now(job_id)
            if token is None:
                with self._guard:
                    self._others[job_id] = "?"  # taken: the next round says by whom
                return None
        return Fence(self.instance_id, token)

    def lost(self, job_id: str) -> None:
        """A fenced write found the lease gone: stop treating the job as held."""
        with self._guard:
            if self._held.pop(job_id, None) is not None:
                self.changes["lost"] += 1
            self._others[job_id] = "?"  # until the next round says who holds it

    def forget(self, job_id: str) -> None:
        """The job was deleted (its lease row with it): a job registered again under
        its id starts with a free lease, claimed by whoever syncs it first."""
        with self._guard:
            self._held.pop(job_id, None)
            self._others.pop(job_id, None)

    def round(self) -> list[str]:
        """Beat, renew, then claim or release towards the fair share (worker thread).
        The jobs newly claimed (worth a sync now)."""
        me = self.instance_id
        with self._factory.begin() as session:
            now = lease_store.heartbeat(
                session,
                me,
                hostname=self.identity.hostname,
                pid=self.identity.pid,
                version=self.identity.version,
            )
            lease_store.prune_instances(session, PRUNE_AFTER_PERIODS * self.period)
            lease_store.ensure_leases(session)
            renewed = lease_store.renew(session, me, self.period)
        with self._factory() as session:
            rows = lease_store.lease_rows(session)
            known = lease_store.instances(session)
        dead = self._gone_from_this_host(known)
        live = frozenset(i.instance_id for i in known if now - i.heartbeat_at < self.period) - dead
        with self._guard:
            lost = set(self._held) - set(renewed)
            self.changes["lost"] += len(lost)
            self._held = renewed
            self._others = {
                row.job_id: row.holder
                for row in rows
                if row.holder not in (None, me) and row.holder in live and not row.expired
            }
        for job_id in sorted(lost):
            logger.warning("lease of %s lost (another process took it over)", job_id)
        plan = plan_round(rows, me, live | {me}, dead)
        claimed: dict[str, int] = {}
        if plan.claim:
            with self._factory.begin() as session:
                claimed = lease_store.claim(session, me, plan.claim, self.period, dead_holders=dead)
            self._note_claimed(claimed)
        for job_id in plan.release:
            self._release(job_id)
        self.rounds += 1
        return sorted(claimed)

    def stop(self) -> None:
        """Release every lease and leave `server_instances` (a clean shutdown: the
        other processes take the jobs over at their next round, not a period later)."""
        with self._factory.begin() as session:
            released = lease_store.release(session, self.instance_id)
            lease_store.forget_instance(session, self.instance_id)
        with self._guard:
            self._held.clear()
        self.changes["released"] += len(released)

    def _claim_now(self, job_id: str) -> int | None:
        with self._factory.begin() as session:
            lease_store.ensure_leases(session)
            claimed = lease_store.claim(session, self.instance_id, [job_id], self.period)
        if not claimed:
            return None
        self._note_claimed(claimed)
        return claimed[job_id]

    def _has_lease_row(self, job_id: str) -> bool:
        with self._factory() as session:
            return session.get(IngestLease, job_id) is not None

    def _note_claimed(self, claimed: dict[str, int]) -> None:
        with self._guard:
            self._held.update(claimed)
            for job_id in claimed:
                self._others.pop(job_id, None)
        self.changes["claimed"] += len(claimed)
        if claimed:
            logger.info("ingest leases claimed: %s", ", ".join(sorted(claimed)))

    def _release(self, job_id: str) -> None:
        with self.quiesce(job_id):
            with self._factory.begin() as session:
                released = lease_store.release(session, self.instance_id, [job_id])
            with self._guard:
                self._held.pop(job_id, None)
        if released:
            self.changes["released"] += 1
            logger.info("ingest lease of %s released (fair share)", job_id)

    def _gone_from_this_host(self, known: list[ServerInstance]) -> frozenset[str]:
        """Instances of this host and pid namespace whose process no longer runs
        (a server killed and restarted here: its jobs need not wait a period).

        Another instance with this very pid is left alone: it is an earlier app of
        this same process (tests build several), or one that still runs.
        """
        gone = set()
        for instance in known:
            if scope_of(instance.instance_id) != self.identity.scope:
                continue
            if instance.pid != self.identity.pid and not pid_is_running(instance.pid):
                gone.add(instance.instance_id)
        return frozenset(gone)
