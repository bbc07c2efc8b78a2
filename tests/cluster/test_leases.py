"""Leases in the database (PostgreSQL: the only engine several processes share):
grants by the database's clock, fencing tokens, and a stale holder's commit refused.

The fenced compare-and-swap is the persister's own: a sync under an old token,
or under an expired one, writes nothing and raises `LeaseLostError`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from tests.api.live_support import append_steps
from training_platform.errors import LeaseLostError
from training_platform.ingest.metrics_file import METRICS
from training_platform.ingest.persister import sync_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.store import leases
from training_platform.store.cluster_models import IngestLease
from training_platform.store.leases import Fence, writing_under
from training_platform.store.models import Job, SyncState, TrainingMetric

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def register(factory: sessionmaker[Session], *job_ids: str, directory: Path) -> None:
    with factory.begin() as session:
        for job_id in job_ids:
            session.add(Job(job_id=job_id, metrics_dir=str(directory), created_at=time.time()))
        session.flush()
        leases.ensure_leases(session)


def claim(factory: sessionmaker[Session], holder: str, job_id: str, period: float) -> int | None:
    with factory.begin() as session:
        return leases.claim(session, holder, [job_id], period).get(job_id)


def test_a_lease_is_granted_once_until_it_expires_then_with_a_new_token(
    session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    register(session_factory, "run1", directory=metrics_dir)
    assert claim(session_factory, "a", "run1", 0.5) == 1
    assert claim(session_factory, "b", "run1", 0.5) is None  # a holds it
    with session_factory.begin() as session:
        assert leases.renew(session, "a", 0.5) == {"run1": 1}  # same token on renewal
    time.sleep(0.7)
    assert claim(session_factory, "b", "run1", 0.5) == 2
    with session_factory.begin() as session:
        assert leases.renew(session, "a", 0.5) == {}  # a lost it
        assert leases.release(session, "b") == ["run1"]
    assert claim(session_factory, "a", "run1", 0.5) == 3


def test_a_dead_holders_lease_is_taken_before_it_expires(
    session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    register(session_factory, "run1", directory=metrics_dir)
    assert claim(session_factory, "gone", "run1", 600) == 1
    with session_factory.begin() as session:
        assert leases.claim(session, "b", ["run1"], 600) == {}
        taken = leases.claim(session, "b", ["run1"], 600, dead_holders=frozenset({"gone"}))
    assert taken == {"run1": 2}


def test_the_database_clock_decides_not_the_processes(
    session_factory: sessionmaker[Session], metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(session_factory, "run1", directory=metrics_dir)
    assert claim(session_factory, "a", "run1", 600) == 1
    # A process whose clock runs a day ahead still sees a's lease as current.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400)
    assert claim(session_factory, "skewed", "run1", 600) is None
    with session_factory() as session:
        assert abs(leases.read_db_now(session) - real()) < 60


def test_a_stale_holder_cannot_commit_a_batch(
    session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    register(session_factory, "run1", directory=metrics_dir)
    reader = LocalMetricsReader("run1", metrics_dir)
    path = metrics_dir / "run1_metrics.jsonl"
    append_steps(path, range(0, 5))
    first = claim(session_factory, "a", "run1", 600)
    assert first == 1
    with writing_under(Fence("a", first)):
        assert sync_file(session_factory, "run1", reader, METRICS).new_metrics == 5

    # b takes the job over (a paused past its lease, say); a resumes and reads on.
    with session_factory.begin() as session:
        session.execute(update(IngestLease).values(expires_at=0.0))
    second = claim(session_factory, "b", "run1", 600)
    assert second == 2
    append_steps(path, range(5, 8))
    with writing_under(Fence("a", first)), pytest.raises(LeaseLostError):
        sync_file(session_factory, "run1", reader, METRICS)
    assert stored_steps(session_factory) == 5  # a wrote nothing
    with writing_under(Fence("b", second)):
        assert sync_file(session_factory, "run1", reader, METRICS).new_metrics == 3
    with session_factory() as session:
        state = session.get(SyncState, ("run1", "metrics"))
        assert state is not None and state.records_ingested == 8  # each line once


def test_an_expired_lease_fences_even_when_nobody_took_it(
    session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    register(session_factory, "run1", directory=metrics_dir)
    reader = LocalMetricsReader("run1", metrics_dir)
    append_steps(metrics_dir / "run1_metrics.jsonl", range(0, 3))
    token = claim(session_factory, "a", "run1", 0.3)
    assert token == 1
    time.sleep(0.5)  # a was paused past its lease: it must not write...
    with writing_under(Fence("a", token)), pytest.raises(LeaseLostError):
        sync_file(session_factory, "run1", reader, METRICS)
    assert stored_steps(session_factory) == 0
    with session_factory.begin() as session:  # ...until it has renewed it (same token)
        assert leases.renew(session, "a", 600) == {"run1": 1}
    with writing_under(Fence("a", token)):
        assert sync_file(session_factory, "run1", reader, METRICS).new_metrics == 3


def stored_steps(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(TrainingMetric)) or 0)
