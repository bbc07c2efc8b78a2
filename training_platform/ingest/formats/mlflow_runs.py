"""Which reader an MLflow run's `tracking_uri` names: a tracking database
(`mlflow_store.py`), a file store (`mlflow_files.py`) or a tracking server
(`mlflow_rest.py`). The job's metrics kinds and its run status, whichever it is."""

from __future__ import annotations

from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_files import (
    file_store_kinds,
    file_store_status,
    is_file_store,
)
from training_platform.ingest.formats.mlflow_rest import is_server, server_kinds, server_status
from training_platform.ingest.formats.mlflow_store import mlflow_kind, run_status


def mlflow_kinds(uri: str, run_id: str) -> tuple[LineFileKind, ...]:
    """The kinds holding the run's metrics: the database's rows as one, or one per key."""
    if is_file_store(uri):
        return file_store_kinds(uri, run_id)
    if is_server(uri):
        return server_kinds(uri, run_id)
    return (mlflow_kind(uri, run_id),)


def mlflow_status(uri: str, run_id: str) -> str | None:
    """The job status of the run's MLflow status (None: it cannot be read now)."""
    if is_file_store(uri):
        return file_store_status(uri, run_id)
    if is_server(uri):
        return server_status(uri, run_id)
    return run_status(uri, run_id)
