"""Lease keepers sharing one PostgreSQL database: fair shares, rebalancing when a
process joins, hand-over when one stops, and a dead process's jobs taken at once.

Each keeper is one server process's (its own identity); the rounds are run
by hand here, as the hub runs them every third of a lease period.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.errors import JobNotFoundError
from training_platform.ingest.lease_keeper import Identity, LeaseKeeper, scope_of
from training_platform.store.cluster_models import IngestLease, ServerInstance
from training_platform.store.models import Job

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def add_jobs(factory: sessionmaker[Session], count: int, *, host: str | None = None) -> None:
    with factory.begin() as session:
        for index in range(count):
            name = f"{host or 'local'}-{index}"
            if host is None:
                session.add(Job(job_id=name, metrics_dir="/tmp", created_at=time.time()))
            else:
                session.add(Job(job_id=name, source="ssh", ssh_host=host, created_at=time.time()))


def keeper(factory: sessionmaker[Session], name: str, *, pid: int = 0) -> LeaseKeeper:
    me = Identity.of_this_process()
    identity = Identity(f"{me.scope}:{pid or os.getpid()}:{name}", me.hostname, pid or me.pid, "t")
    return LeaseKeeper(factory, period=600, identity=identity)


def holders(factory: sessionmaker[Session]) -> Counter[str | None]:
    with factory() as session:
        return Counter(session.scalars(select(IngestLease.holder)))


def settle(keepers: list[LeaseKeeper], rounds: int = 3) -> None:
    for _ in range(rounds):
        for each in keepers:
            each.round()


def test_two_processes_split_the_jobs_and_a_third_gets_its_share(
    session_factory: sessionmaker[Session],
) -> None:
    add_jobs(session_factory, 10)
    a, b = keeper(session_factory, "a"), keeper(session_factory, "b")
    settle([a, b])
    assert sorted(holders(session_factory).values()) == [5, 5]
    assert set(a.held()).isdisjoint(b.held())

    c = keeper(session_factory, "c")
    settle([a, b, c])
    counts = holders(session_factory)
    assert None not in counts and sum(counts.values()) == 10
    assert max(counts.values()) <= 4 and counts[c.instance_id] >= 2
    assert a.changes["released"] + b.changes["released"] >= 2


def test_a_process_that_stops_hands_its_jobs_over_at_the_next_round(
    session_factory: sessionmaker[Session],
) -> None:
    add_jobs(session_factory, 6)
    a, b = keeper(session_factory, "a"), keeper(session_factory, "b")
    settle([a, b])
    a.stop()
    with session_factory() as session:
        assert session.get(ServerInstance, a.instance_id) is None
    b.round()
    assert holders(session_factory) == Counter({b.instance_id: 6})


def test_the_jobs_of_a_dead_process_on_this_host_are_taken_at_once(
    session_factory: sessionmaker[Session],
) -> None:
    add_jobs(session_factory, 4)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)  # its pid now names no process
    dead = keeper(session_factory, "dead", pid=child.pid)
    dead.round()
    assert len(dead.held()) == 4  # leases for 600 s

    survivor = keeper(session_factory, "survivor")
    survivor.round()
    assert holders(session_factory) == Counter({survivor.instance_id: 4})
    assert survivor.changes["claimed"] == 4


def test_a_process_of_another_host_is_not_judged_by_this_hosts_pids(
    session_factory: sessionmaker[Session],
) -> None:
    add_jobs(session_factory, 2)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)  # a pid that names no process *here*
    far = keeper(session_factory, "far", pid=child.pid)
    far.identity = Identity(f"elsewhere/1:{child.pid}:far", "elsewhere", child.pid, "t")
    assert scope_of(far.instance_id) == "elsewhere/1"
    far.round()
    here = keeper(session_factory, "here")
    here.round()
    assert here.held() == {}  # far's leases are current: only their expiry frees them
    settle([far, here])
    assert sorted(holders(session_factory).values()) == [1, 1]  # then fair shares


def test_an_ssh_hosts_jobs_stay_on_one_process(session_factory: sessionmaker[Session]) -> None:
    add_jobs(session_factory, 3, host="gpu1")
    add_jobs(session_factory, 3, host="gpu2")
    a, b = keeper(session_factory, "a"), keeper(session_factory, "b")
    settle([a, b])
    hosts_of = {each.instance_id: {job.split("-")[0] for job in each.held()} for each in (a, b)}
    assert sorted(map(sorted, hosts_of.values())) == [["gpu1"], ["gpu2"]]


def test_a_new_job_is_claimed_on_the_spot_and_not_by_a_second_process(
    session_factory: sessionmaker[Session],
) -> None:
    a, b = keeper(session_factory, "a"), keeper(session_factory, "b")
    settle([a, b])

    def register() -> bool:  # what discovery does when the job's files appear
        add_jobs(session_factory, 1)
        return True

    fence = a.fence_for("local-0", discover=register)  # no lease row yet: discovered
    assert fence is not None and fence.token == 1
    assert b.fence_for("local-0", discover=lambda: True) is None
    b.round()
    assert b.fence_for("local-0", discover=lambda: True) is None  # a's, known without a query
    with pytest.raises(JobNotFoundError):
        a.fence_for("no-such-job", discover=lambda: False)
