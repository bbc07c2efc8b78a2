"""Stall detection: a run that says "running" but whose metrics file stopped growing.

A trainer killed by the OOM killer, a hung NCCL collective or a lost node never
writes a final status: its status file says "running" forever. The only sign
is silence, judged against the run's own rhythm: a job is stalled when its
file has not grown for `factor` times its usual step time (the median gap
between the timestamps of its recent records), and for at least
`min_seconds`, so a run with 2-second steps is not called stalled during a
one-minute checkpoint save.

Time comes from an injected clock (Unix seconds, like `received_at` in the
database), so tests move time instead of sleeping.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.store.models import STALLED, Job, TrainingMetric

logger = logging.getLogger(__name__)

_GAPS: Final = 32  # recent timestamp gaps kept per job for the median step time
# Timestamps that give `_GAPS` gaps: what priming reads back from the database.
RHYTHM_RECORDS: Final = _GAPS + 1


@dataclass
class _JobRhythm:
    last_growth: float
    last_timestamp: float | None = None
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=_GAPS))
    status_updated_at: float | None = None
    reported_stalled: bool = False


class StallWatch:
    """Per-job "when did it last grow" and "how long is a step", kept in memory.

    Thread-safe: syncs of different jobs run in different worker threads.
    State is primed from the database on a job's first use (`is_primed`/`prime`),
    so a server restart judges a silent run by when its last record landed,
    not by when the server came back.
    """

    def __init__(
        self,
        *,
        factor: float,
        min_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.factor = factor
        self.min_seconds = min_seconds
        self.clock = clock
        self._jobs: dict[str, _JobRhythm] = {}
        self._guard = threading.Lock()

    def is_primed(self, job_id: str) -> bool:
        with self._guard:
            return job_id in self._jobs

    def prime(self, job_id: str, *, last_growth: float, timestamps: Iterable[float]) -> None:
        """Start tracking a job: when it last grew, and its recent record timestamps."""
        rhythm = _JobRhythm(last_growth=last_growth)
        for timestamp in timestamps:
            _add_timestamp(rhythm, timestamp)
        with self._guard:
            self._jobs.setdefault(job_id, rhythm)

    def note_records(self, job_id: str, records: Iterable[Mapping[str, Any]]) -> None:
        """New records were stored: the file grew now."""
        now = self.clock()
        with self._guard:
            rhythm = self._jobs.setdefault(job_id, _JobRhythm(last_growth=now))
            rhythm.last_growth = now
            for record in records:
                timestamp = record.get("timestamp")
                if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
                    _add_timestamp(rhythm, float(timestamp))

    def note_status(self, job_id: str, updated_at: float | None) -> None:
        """The trainer rewrote its status file: a new `updated_at` is a sign of life too.

        Only a change counts (the first value seen is a baseline): the trainer's
        clock may differ from ours, so its value is never compared with ours.
        """
        if updated_at is None:
            return
        now = self.clock()
        with self._guard:
            rhythm = self._jobs.setdefault(job_id, _JobRhythm(last_growth=now))
            if rhythm.status_updated_at is not None and updated_at != rhythm.status_updated_at:
                rhythm.last_growth = now
            rhythm.status_updated_at = updated_at

    def step_time(self, job_id: str) -> float | None:
        """The job's usual seconds per record (median recent gap), None before two records."""
        with self._guard:
            rhythm = self._jobs.get(job_id)
            gaps = list(rhythm.gaps) if rhythm else []
        return statistics.median(gaps) if gaps else None

    def threshold(self, job_id: str) -> float:
        """Seconds of silence after which the job counts as stalled."""
        usual = self.step_time(job_id)
        return max(self.min_seconds, self.factor * usual) if usual else self.min_seconds

    def silent_for(self, job_id: str) -> float | None:
        with self._guard:
            rhythm = self._jobs.get(job_id)
            last = rhythm.last_growth if rhythm else None
        return None if last is None else self.clock() - last

    def is_stalled(self, job_id: str) -> bool:
        silent = self.silent_for(job_id)
        return silent is not None and silent > self.threshold(job_id)

    def verdict_flips(self, job_id: str, status: str) -> bool:
        """Whether a sync now would change the job's stalled verdict.

        Silence is news too: a running job turns stalled with no change to its
        files, so a background round syncs it to mark it (and once more when
        it recovers).
        """
        if status == "running":
            return self.is_stalled(job_id)
        return status == STALLED and not self.is_stalled(job_id)

    def report(self, job_id: str, *, stalled: bool) -> bool:
        """Note the verdict the job was given; True when it differs from the last one.

        The caller logs only then: a stalled run is judged again on every sync
        (its status file keeps saying running), but stalls once.
        """
        with self._guard:
            rhythm = self._jobs.setdefault(job_id, _JobRhythm(last_growth=self.clock()))
            changed = rhythm.reported_stalled != stalled
            rhythm.reported_stalled = stalled
            return changed

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._jobs.pop(job_id, None)


def _add_timestamp(rhythm: _JobRhythm, timestamp: float) -> None:
    if timestamp != timestamp or timestamp in (float("inf"), float("-inf")):
        return
    previous, rhythm.last_timestamp = rhythm.last_timestamp, timestamp
    # Only forward gaps count: a rewritten (resumed) step goes back in time.
    if previous is not None and timestamp > previous:
        rhythm.gaps.append(timestamp - previous)


def review_stall(stall: StallWatch, session: Session, job: Job) -> None:
    """Mark `job` stalled, or running again, after its status file was copied onto it.

    The status file knows nothing of "stalled": it keeps saying running. The
    sync service calls this before committing the status, so the stored
    status and every announcement of it already carry the verdict.
    """
    job_id = job.job_id
    if not stall.is_primed(job_id):
        _prime(stall, session, job)
    stall.note_status(job_id, job.updated_at)
    stalled = False
    if job.status in ("running", STALLED):
        stalled = stall.is_stalled(job_id)
        job.status = STALLED if stalled else "running"
    # Logged at the transitions only, not on every sync of a silent run.
    if stall.report(job_id, stalled=stalled):
        if stalled:
            logger.warning(
                "job %s is stalled: its metrics file has not grown for %.0f s",
                job_id,
                stall.silent_for(job_id) or 0.0,
            )
        else:
            logger.info("job %s is no longer stalled (now %s)", job_id, job.status)


def _prime(stall: StallWatch, session: Session, job: Job) -> None:
    """The job's rhythm from the database: a restarted server judges a silent run
    by when its last record landed, not by when the server came back."""
    newest = session.scalar(
        select(func.max(TrainingMetric.received_at)).where(TrainingMetric.job_id == job.job_id)
    )
    timestamps = session.scalars(
        select(TrainingMetric.timestamp)
        .where(TrainingMetric.job_id == job.job_id)
        .order_by(TrainingMetric.step.desc())
        .limit(RHYTHM_RECORDS)
    ).all()
    last_growth = newest if newest is not None else job.created_at
    stall.prime(
        job.job_id,
        last_growth=last_growth if last_growth is not None else stall.clock(),
        timestamps=[t for t in reversed(timestamps) if t is not None and math.isfinite(t)],
    )
