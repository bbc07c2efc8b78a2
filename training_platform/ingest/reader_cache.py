"""One reader per job, kept between syncs: an SSH reader holds a connection worth reusing."""

from __future__ import annotations

import logging
import threading

from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.registry import make_reader
from training_platform.settings import Settings
from training_platform.store.models import Job

logger = logging.getLogger(__name__)


class ReaderCache:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._readers: dict[str, MetricsReader] = {}
        self._guard = threading.Lock()

    def of(self, job: Job) -> MetricsReader:
        with self._guard:
            reader = self._readers.get(job.job_id)
            if reader is None:
                reader = self._readers[job.job_id] = make_reader(job, self._settings)
            return reader

    def forget(self, job_id: str) -> None:
        with self._guard:
            reader = self._readers.pop(job_id, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        with self._guard:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            try:
                reader.close()
            except Exception:
                logger.exception("closing a reader failed")
