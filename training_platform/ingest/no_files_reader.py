"""The reader of a job with no files (see `NoFilesReader`)."""

from __future__ import annotations

from collections.abc import Callable

from training_platform.ingest.line_scanner import ReadAt, ReadBatch
from training_platform.ingest.readers import MetricsReader, MissingFileError


class NoFilesReader(MetricsReader):
    """The reader of a job with no files: a run read from a tracking database (MLflow).
    Its optional files (status, run file, samples) never exist; its metrics come
    from its kind's query."""

    def _with_file(
        self, name: str, what: str, scan: Callable[[ReadAt, int], ReadBatch]
    ) -> ReadBatch:
        raise MissingFileError(f"{what}: job {self.job_id!r} has no files")

    def read_small_file(self, suffix: str, limit: int) -> bytes | None:
        return None

    def metrics_file_exists(self) -> bool:
        return False

    def file_signature(self, suffix: str) -> tuple[int, ...] | None:
        return None

    def location(self, suffix: str) -> str:
        return f"(no file: {self.job_id}{suffix})"

    def list_names(self, prefix: str, under: str = "") -> list[str]:
        return []

    def list_directories(self) -> list[str]:
        return []

    @property
    def status_location(self) -> str:
        return self.location("_status.json")

    def close(self) -> None:
        pass
