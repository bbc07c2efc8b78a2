"""`IngestStats`: per-job counts for /metrics, bounded however many jobs come and go."""

from __future__ import annotations

from training_platform.ingest.ingest_stats import OTHER_JOBS, FileIngest, IngestStats
from training_platform.ingest.persister import SyncResult


def batch(job_id: str, records: int = 0, *, offset: int = 0, size: int = 0) -> SyncResult:
    return SyncResult(job_id=job_id, new_metrics=records, offset=offset, file_size=size)


def test_counts_add_up_and_the_lag_is_the_last_reads() -> None:
    stats = IngestStats(clock=lambda: 1234.5)
    stats.batch("run1", "metrics", batch("run1", 3, offset=100, size=400))
    later = SyncResult(
        job_id="run1", lines_malformed=2, lines_oversized=1, offset=400, file_size=400
    )
    stats.batch("run1", "metrics", later)
    assert stats.snapshot() == {
        ("run1", "metrics"): FileIngest(
            records=3, malformed=2, oversized=1, bytes_behind=0, last_record_at=1234.5
        )
    }
    stats.batch("run1", "metrics", batch("run1", 0, offset=400, size=900))
    assert stats.snapshot()[("run1", "metrics")].bytes_behind == 500


def test_a_file_the_job_does_not_have_gets_no_series() -> None:
    stats = IngestStats()
    stats.batch("run1", "samples", batch("run1"))
    assert stats.snapshot() == {}


def test_jobs_past_the_cap_share_one_series_and_totals_stay_right() -> None:
    stats = IngestStats(max_jobs=2)
    for job_id in ("a", "b", "c", "d"):
        stats.batch(job_id, "metrics", batch(job_id, 1, offset=10, size=10))
    snapshot = stats.snapshot()
    assert {job for job, _ in snapshot} == {"a", "b", OTHER_JOBS}
    assert snapshot[(OTHER_JOBS, "metrics")].records == 2
    assert sum(ingest.records for ingest in snapshot.values()) == 4
    stats.forget("a")  # a deleted job frees its place
    stats.batch("e", "metrics", batch("e", 1, offset=1, size=1))
    assert {job for job, _ in stats.snapshot()} == {"b", "e", OTHER_JOBS}
