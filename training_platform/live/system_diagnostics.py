"""Diagnosis from system samples: the system detectors over each batch that lands.

`live/system_detectors.py` judges each host's samples; this module keeps one
monitor per job, feeds it the samples of each committed `system` batch in
time order, asks after each metrics batch whether a host's sampler went
silent, and stores what it finds as anomalies with source "system" (the GPU
indexes as `evidence`), on the same anomaly stream, webhook and health
verdict as the other sources. Only findings new to the store are returned.

An anomaly sits at a training step: a sample's own step, else (a node that
runs no callback) the newest step the job had reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.live.anomaly_store import DetectorSource, store_findings
from training_platform.live.system_detectors import SystemFinding, SystemMonitor
from training_platform.store.models import Job

SOURCE: Final = "system"
RUNNING: Final = frozenset({"running", "stalled"})


class SystemDiagnostics(DetectorSource[SystemMonitor]):
    def __init__(
        self, factory: sessionmaker[Session], *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(factory, SystemMonitor, clock=clock)

    def diagnose(self, job_id: str, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Check a committed batch of samples; the anomaly rows new to the store."""
        status, step = self._job_state(job_id)
        monitor = self._monitors.get(job_id)
        findings: list[SystemFinding] = []
        for sample in sorted(samples, key=lambda s: (s["timestamp"], s["host"])):
            findings += monitor.check(sample, running=status in RUNNING)
        return self._store(job_id, findings, step, monitor.extents())

    def records_landed(self, job_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A metrics batch landed: hosts whose sampler went silent meanwhile."""
        monitor = self._monitors.find(job_id)
        times = [r["timestamp"] for r in records if isinstance(r.get("timestamp"), float | int)]
        if monitor is None or not times:
            return []
        findings = monitor.silent_hosts(max(times))
        if not findings:
            return []
        newest_step = max(record["step"] for record in records)
        return self._store(job_id, findings, newest_step, [])

    def _job_state(self, job_id: str) -> tuple[str | None, int | None]:
        with self._factory() as session:
            row = session.execute(
                select(Job.status, Job.current_step).where(Job.job_id == job_id)
            ).first()
        return (row[0], row[1]) if row is not None else (None, None)

    def _store(
        self,
        job_id: str,
        findings: list[SystemFinding],
        job_step: int | None,
        extents: list[tuple[str, int, int]],
    ) -> list[dict[str, Any]]:
        if not findings and not extents:
            return []
        now = self._clock()
        # One row per (step, type): hosts that find the same thing at one step share it.
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        for finding in findings:
            step = finding.step if finding.step is not None else job_step or 0
            row = rows.get((step, finding.type))
            if row is None:
                rows[(step, finding.type)] = {
                    "job_id": job_id,
                    "step": step,
                    "type": finding.type,
                    "severity": finding.severity,
                    "message": finding.message,
                    "source": SOURCE,
                    "created_at": now,
                    "evidence": list(finding.evidence),
                    "end_step": step,
                }
            else:
                row["message"] = f"{row['message']}; {finding.message}"[:2000]
                if finding.severity == "critical":
                    row["severity"] = "critical"
        return store_findings(self._factory, job_id, SOURCE, list(rows.values()), extents)
