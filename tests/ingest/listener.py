"""A sync listener for the ingestion tests: it keeps every committed batch it hears."""

from __future__ import annotations

from training_platform.ingest.persister import CommittedBatch
from training_platform.store.models import Job


class Heard:
    def __init__(self) -> None:
        self.batches: list[CommittedBatch] = []

    def batch_committed(self, job_id: str, batch: CommittedBatch) -> None:
        self.batches.append(batch)

    def status_changed(self, job: Job) -> None:
        pass

    def samples(self) -> list[tuple[int, int]]:
        """(step, count) of every samples batch heard, in order."""
        found = []
        for batch in self.batches:
            if batch.kind == "samples":
                steps = sorted({sample["step"] for sample in batch.records})
                found += [(s, sum(r["step"] == s for r in batch.records)) for s in steps]
        return found
