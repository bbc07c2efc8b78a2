"""The jobs list's per-job figures (`metrics_count`, `latest_step`) come from the
top-level rollup buckets, not from counting every row (the list polls, and a
million-step run's count took ~300 ms), and stay exact when a job's buckets
lag behind its rows. Both databases."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.records import build_record
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.store.jobs import page_jobs, summarize_jobs
from training_platform.store.models import Job


def _records(steps: range) -> list[dict[str, Any]]:
    return [build_record(step, {"loss": {"actor_loss": 1.0}}, timestamp=1.0) for step in steps]


def _add(session: Session, job_id: str, created_at: float) -> None:
    session.add(Job(job_id=job_id, created_at=created_at))
    session.flush()


def test_counts_come_from_the_buckets_and_stay_exact_when_they_lag(
    session_factory: sessionmaker[Session],
) -> None:
    with session_factory() as session:
        _add(session, "ingested", 3.0)
        # Two top-level buckets (524,288 steps each) and a rewritten stretch.
        for steps in (range(0, 3_000), range(600_000, 600_500), range(100, 200)):
            upsert_metrics(session, job_id="ingested", records=_records(steps), received_at=1.0)
        _add(session, "lagging", 2.0)  # rows beyond its buckets, written by someone else
        upsert_metrics(session, job_id="lagging", records=_records(range(50)), received_at=1.0)
        _insert_rows(session, "lagging", range(50, 70))
        _add(session, "unrolled", 1.0)  # rows, no buckets at all
        _insert_rows(session, "unrolled", range(7))
        _add(session, "empty", 0.0)
        session.commit()

    statements: list[str] = []
    with session_factory() as session:
        event.listen(session.get_bind(), "before_cursor_execute", _record_into(statements))
        page, total = page_jobs(session, limit=10)
    figures = {s.job.job_id: (s.metrics_count, s.latest_step) for s in page}
    assert total == 4
    assert figures == {
        "ingested": (3_500, 600_499),
        "lagging": (70, 69),
        "unrolled": (7, 6),
        "empty": (0, None),
    }
    # Only the two jobs whose buckets lag had their rows counted.
    counts = [s for s in statements if _counts_rows(s)]
    assert len(counts) == 1
    statements.clear()
    with session_factory() as session:
        event.listen(session.get_bind(), "before_cursor_execute", _record_into(statements))
        (one,) = summarize_jobs(session, "ingested")
    assert (one.metrics_count, one.latest_step) == (3_500, 600_499)
    assert not [s for s in statements if _counts_rows(s)]


def _insert_rows(session: Session, job_id: str, steps: range) -> None:
    """Rows as another writer would leave them: no rollup buckets."""
    for step in steps:
        session.execute(
            text(
                "INSERT INTO training_metrics (job_id, step, timestamp, received_at, has_anomaly)"
                " VALUES (:job, :step, 1.0, 1.0, false)"
            ),
            {"job": job_id, "step": step},
        )


def _counts_rows(statement: str) -> bool:
    """A statement counting rows of training_metrics per job (what the list did)."""
    return "GROUP BY training_metrics.job_id" in statement


def _record_into(statements: list[str]) -> Any:
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    return before
