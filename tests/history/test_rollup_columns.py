"""`rollup_columns` (sealed chunks of buckets stored per series) gives the same
answers as `metric_rollups` alone, on both databases, and stays true when
stored steps are rewritten.

Every check compares `downsampled_history` as served (chunks where sealed)
with the same query read from `metric_rollups` only, and also checks that
the chunks were really read: a test that passed through the old path alone
would prove nothing.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.records import build_record, normalize_record
from training_platform.history.series import read
from training_platform.history.series.answer import downsampled_history
from training_platform.history.series.stored import rollup_columns
from training_platform.history.series.stored.metric_rollups import WIDTHS, read_stored_buckets
from training_platform.history.series.stored.rollup_columns import CHUNK, rebuild_chunks
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.store.models import Job

JOB = "chunked"
STEPS = 30_000
FIELD_CHOICES: tuple[frozenset[str] | None, ...] = (
    None,
    frozenset({"loss"}),
    frozenset({"loss.actor_loss", "extra.late"}),
    frozenset({"reward.mean", "extra"}),
    frozenset({"absent.series"}),
)


def _record(step: int, rng: random.Random, spike: float | None = None) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "loss": {"actor_loss": spike if spike is not None else rng.gauss(1.0, 0.1)},
        "reward": {"mean": rng.random()},
    }
    if step >= 12_000:  # a series that starts mid-run, inside a chunk
        metrics["extra"] = {"late": float(step % 97)}
    if step % 1_001 == 0:
        metrics["kl"] = {"mean": math.nan}  # non-finite: counted, not summed
    if step % 7 == 3:  # no timestamp at all
        return normalize_record({"step": step, **metrics})
    return build_record(step, metrics, timestamp=1.7e9 + step)


def _store(factory: sessionmaker[Session], records: list[dict[str, Any]], batch: int) -> None:
    with factory() as session:
        if session.get(Job, JOB) is None:
            session.add(Job(job_id=JOB, created_at=0.0))
            session.flush()
        for start in range(0, len(records), batch):
            part = records[start : start + batch]
            upsert_metrics(session, job_id=JOB, records=part, received_at=1.0)  # + rollups
        session.commit()


def _steps(rng: random.Random) -> list[int]:
    """A run with a long gap and scattered missing steps."""
    return [s for s in range(STEPS) if not 5_000 <= s < 9_000 and rng.random() > 0.1]


def _answer(factory: sessionmaker[Session], query: dict[str, Any]) -> dict[str, Any]:
    with factory() as session:
        return downsampled_history(session, job_id=JOB, **query)


def _queries(rng: random.Random, count: int) -> list[dict[str, Any]]:
    queries: list[dict[str, Any]] = [
        {"start_step": None, "end_step": None, "max_points": points, "fields": fields}
        for points in (100, 937, 2_000)
        for fields in FIELD_CHOICES
    ]
    for _ in range(count):
        lo = rng.randrange(0, STEPS - 8_000)
        queries.append(
            {
                "start_step": lo,
                "end_step": rng.randrange(lo + 7_000, STEPS + 500),
                "max_points": rng.choice((50, 200, 700)),
                "fields": rng.choice(FIELD_CHOICES),
            }
        )
    return queries


def _check_same_as_rollups_alone(
    factory: sessionmaker[Session], queries: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk_runs = 0
    build_run = rollup_columns._chunk_run

    def counted(*args: Any) -> Any:
        nonlocal chunk_runs
        chunk_runs += 1
        return build_run(*args)

    served = []
    with monkeypatch.context() as patch:
        patch.setattr(rollup_columns, "_chunk_run", counted)
        for query in queries:
            served.append(_answer(factory, query))
    assert chunk_runs > len(queries) // 2, "the sealed chunks were not read"

    def stored_only(session: Session, job_id: str, level: int, first: int, last: int, *_: Any):  # type: ignore[no-untyped-def]
        return read_stored_buckets(session, job_id, level, first, last)

    with monkeypatch.context() as patch:
        patch.setattr(read, "read_buckets", stored_only)
        for query, answer in zip(queries, served, strict=True):
            assert answer == _answer(factory, query), query


def test_answers_match_the_rollups_alone(
    session_factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    _store(session_factory, [_record(s, rng) for s in _steps(rng)], batch=3_000)
    with session_factory() as session:
        sealed = session.execute(
            text("SELECT level, count(DISTINCT chunk) FROM rollup_columns GROUP BY level")
        ).all()
    # 30k steps: level 0 seals every 2,048 steps, level 1 every 8,192.
    chunks = {int(level): int(count) for level, count in sealed}
    assert chunks[0] >= STEPS // (WIDTHS[0] * CHUNK) - 2
    assert chunks[1] >= 2

    _check_same_as_rollups_alone(session_factory, _queries(rng, 25), monkeypatch)


def test_rewritten_steps_refresh_their_sealed_chunks(
    session_factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run rewrites steps long sealed: the spike must show, nothing stale."""
    rng = random.Random(11)
    _store(session_factory, [_record(s, rng) for s in _steps(rng)], batch=2_500)
    rewritten = [_record(s, rng, spike=1e6 if s == 1_234 else None) for s in range(1_000, 1_500)]
    _store(session_factory, rewritten, batch=500)

    whole = _answer(
        session_factory,
        {"start_step": None, "end_step": None, "max_points": 300, "fields": frozenset({"loss"})},
    )
    assert max(v for v in whole["series"]["loss.actor_loss"]["max"] if v is not None) == 1e6
    _check_same_as_rollups_alone(session_factory, _queries(rng, 10), monkeypatch)


def test_a_rebuild_stores_what_ingestion_stored(session_factory: sessionmaker[Session]) -> None:
    rng = random.Random(3)
    _store(session_factory, [_record(s, rng) for s in _steps(rng)], batch=1_700)
    select_all = text(
        "SELECT level, chunk, series, payload FROM rollup_columns ORDER BY level, chunk, series"
    )
    with session_factory() as session:
        incremental = [(*row[:3], bytes(row[3])) for row in session.execute(select_all)]
        rebuild_chunks(session, JOB)
        session.commit()
        rebuilt = [(*row[:3], bytes(row[3])) for row in session.execute(select_all)]
    assert incremental
    assert rebuilt == incremental
