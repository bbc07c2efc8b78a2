"""`ClusterFeed`: each job's numbered announcements delivered in order, once, whichever
way they reach the process (its own commit, a notification, the sweep), on both
databases; a pruned gap makes the job's clients reconnect instead of skipping."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from training_platform.live.cluster_feed import ClusterFeed
from training_platform.live.pg_notifications import parse_payload
from training_platform.store.live_outbox import OutboxEntry, append_outbox, prune_outbox

Factory = sessionmaker[Session]


class Clients:
    """What the feed published to this process's clients, and the gaps it told."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.gaps: list[str] = []
        self.watching = True

    def feed(self, factory: Factory) -> ClusterFeed:
        return ClusterFeed(
            factory,
            lambda job_id, entry: self.got.append(entry.seq),
            gap=self.gaps.append,
            watched=lambda job_id: self.watching,
        )


def commit(factory: Factory, count: int = 1) -> list[OutboxEntry]:
    """`count` announcements of run1 committed by "another process"."""
    entries = []
    with factory.begin() as session:
        for _ in range(count):
            payload = {"steps": [[len(entries), 1]]}
            entries.append(
                OutboxEntry(append_outbox(session, "run1", "samples", payload), "samples", payload)
            )
    return entries


def test_numbers_are_gap_free_in_commit_order_and_a_rollback_returns_its_number(
    session_factory: Factory, run1: Path
) -> None:
    assert [e.seq for e in commit(session_factory, 3)] == [1, 2, 3]
    with session_factory() as session:
        append_outbox(session, "run1", "samples", {})
        session.rollback()
    assert [e.seq for e in commit(session_factory)] == [4]


def test_each_way_in_delivers_every_number_once_in_order(
    session_factory: Factory, run1: Path
) -> None:
    clients = Clients()
    feed = clients.feed(session_factory)
    commit(session_factory, 2)  # before the first client: its history covers them
    feed.track("run1")
    first, second, third, fourth, fifth = commit(session_factory, 5)
    feed.announce("run1", second)  # our own commit, but 3 is missing: read first
    feed.catch_up("run1", first.seq)  # a late notification: already delivered
    feed.sweep(["run1"])  # 5, 6, 7 never notified
    feed.announce("run1", fourth)  # delivered by the sweep already
    assert clients.got == [3, 4, 5, 6, 7]
    assert (third.seq, fifth.seq) == (5, 7)


def test_a_job_without_clients_here_is_only_noted(session_factory: Factory, run1: Path) -> None:
    clients = Clients()
    clients.watching = False
    feed = clients.feed(session_factory)
    for entry in commit(session_factory, 3):
        feed.announce("run1", entry)
    assert clients.got == []
    assert feed.delivered("run1") == 3


def test_announcements_pruned_before_delivery_make_the_clients_reconnect(
    session_factory: Factory, run1: Path
) -> None:
    clients = Clients()
    feed = clients.feed(session_factory)
    feed.track("run1")
    commit(session_factory, 3)
    with session_factory.begin() as session:
        assert prune_outbox(session, time.time() + 1) == 3  # all of them, for the test
    (late,) = commit(session_factory)
    feed.catch_up("run1")
    assert clients.gaps == ["run1"]  # told, not skipped silently
    assert clients.got == []
    assert feed.delivered("run1") == late.seq  # and on from there


def test_notification_payloads_are_checked() -> None:
    assert parse_payload("run1 42") == ("run1", 42)
    for bad in ("", "run1", "run1 -3", "run1 4x", "../etc 3", "run1  3"):
        assert parse_payload(bad) is None, bad
