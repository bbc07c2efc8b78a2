"""Diagnosis from generated samples: the sample detectors over each step that lands.

`live/sample_detectors.py` judges one step's samples; this module keeps one
monitor per job, feeds it the steps of each committed samples batch in step
order, and stores what it finds as anomalies with source "samples" and the
sample indexes as `evidence`, on the same anomaly stream, webhook and health
verdict as the other sources. Like `PlatformDiagnostics`, it returns only the
findings new to the store, so nothing is announced twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy.orm import Session, sessionmaker

from training_platform.live.anomaly_store import DetectorSource, store_findings
from training_platform.live.sample_detectors import SampleMonitor
from training_platform.live.sample_step import SampleFinding

SOURCE: Final = "samples"


class SampleDiagnostics(DetectorSource[SampleMonitor]):
    def __init__(
        self, factory: sessionmaker[Session], *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(factory, SampleMonitor, clock=clock)

    def diagnose(self, job_id: str, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Check the steps of a committed batch; return the anomaly rows new to the store.

        A step seen again (a resumed run rewrote it, or its samples came in two
        batches) is judged again with the samples at hand; a finding already
        stored for that (step, type) is refreshed, not announced again.
        """
        by_step: dict[int, list[dict[str, Any]]] = {}
        for sample in samples:
            by_step.setdefault(sample["step"], []).append(sample)
        monitor = self._monitors.get(job_id)
        findings: list[SampleFinding] = []
        for step in sorted(by_step):
            findings += monitor.check(by_step[step])
        since = min(by_step, default=0)
        extents = [extent for extent in monitor.extents() if extent[2] >= since]
        if not findings and not extents:
            return []
        return self._store(job_id, findings, extents)

    def _store(
        self,
        job_id: str,
        findings: list[SampleFinding],
        extents: list[tuple[str, int, int]],
    ) -> list[dict[str, Any]]:
        now = self._clock()
        rows: list[dict[str, Any]] = [
            {
                "job_id": job_id,
                "step": finding.step,
                "type": finding.type,
                "severity": finding.severity,
                "message": finding.message,
                "source": SOURCE,
                "created_at": now,
                "evidence": list(finding.evidence),
                "end_step": finding.step,
            }
            for finding in findings
        ]
        return store_findings(self._factory, job_id, SOURCE, rows, extents)
