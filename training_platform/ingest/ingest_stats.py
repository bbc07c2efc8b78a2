"""What this process ingested, per job and file kind: read by `GET /metrics`.

The sync service notes every committed batch here (one call, a dict update
under a lock); the server's Prometheus collector reads a snapshot at scrape
time (`api/observability/collectors.py`). Counts are this process's since it
started: with several server processes, each reports what it ingested.

Label cardinality stays bounded: the first `max_jobs` jobs get series of their
own; the counts of any further job are added to `OTHER_JOBS`, which no job id
can be (parentheses are not allowed in one), so totals stay right while a
server that has seen many thousands of short runs still exports a bounded page.
A deleted job's series go away (`forget`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from training_platform.ingest.persister import SyncResult

OTHER_JOBS: Final = "(other)"
MAX_JOBS: Final = 1000


@dataclass(frozen=True)
class FileIngest:
    """One job's file of one kind, as far as this process ingested it."""

    records: int = 0  # rows stored
    malformed: int = 0  # lines skipped: not JSON, not a record, or refused by the database
    oversized: int = 0  # lines skipped: longer than max_line_bytes
    bytes_behind: int = 0  # file size minus the committed offset, at the last read
    last_record_at: float | None = None  # Unix time of the last batch that stored rows


class IngestStats:
    """Per (job, kind) counters of this process; thread-safe."""

    def __init__(self, *, max_jobs: int = MAX_JOBS, clock: Callable[[], float] = time.time) -> None:
        self.max_jobs = max_jobs
        self._clock = clock
        self._files: dict[tuple[str, str], FileIngest] = {}
        self._jobs: set[str] = set()
        self._lock = threading.Lock()

    def batch(self, job_id: str, kind: str, result: SyncResult) -> None:
        """One committed batch of `job_id`'s `kind` file (`result`: that batch alone)."""
        now = self._clock() if result.new_metrics else None
        counts = (result.new_metrics, result.lines_malformed, result.lines_oversized)
        with self._lock:
            if (job_id, kind) not in self._files and not any(counts) and not result.file_size:
                return  # a file this job does not have (yet): no series for it
            if job_id not in self._jobs and len(self._jobs) >= self.max_jobs:
                job_id = OTHER_JOBS
            else:
                self._jobs.add(job_id)
            key = (job_id, kind)
            old = self._files.get(key, FileIngest())
            self._files[key] = replace(
                old,
                records=old.records + result.new_metrics,
                malformed=old.malformed + result.lines_malformed,
                oversized=old.oversized + result.lines_oversized,
                bytes_behind=max(0, result.file_size - result.offset),
                last_record_at=now if now is not None else old.last_record_at,
            )

    def forget(self, job_id: str) -> None:
        """The job was deleted: drop its series (its counts do not move to `OTHER_JOBS`)."""
        with self._lock:
            self._jobs.discard(job_id)
            for key in [key for key in self._files if key[0] == job_id]:
                del self._files[key]

    def snapshot(self) -> dict[tuple[str, str], FileIngest]:
        """(job id, kind) -> what was ingested: a copy, safe to read without the lock."""
        with self._lock:
            return dict(self._files)
