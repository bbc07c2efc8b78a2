"""Which reader an MLflow run's source names: a tracking database (`mlflow_store.py`),
a file store on this machine (`mlflow_files.py`) or on an SSH host (`mlflow_sftp.py`:
no `tracking_uri`, the job's `ssh.remote_dir` is the store) or a tracking server
(`mlflow_rest.py`). The job's metrics kinds and its run status, whichever it is."""

from __future__ import annotations

from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_files import (
    file_store_kinds,
    file_store_status,
    is_file_store,
)
from training_platform.ingest.formats.mlflow_rest import is_server, server_kinds, server_status
from training_platform.ingest.formats.mlflow_sftp import sftp_store_kinds, sftp_store_status
from training_platform.ingest.formats.mlflow_store import mlflow_kind, run_status
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.ssh_reader import SSHMetricsReader


def mlflow_kinds(uri: str | None, run_id: str, reader: MetricsReader) -> tuple[LineFileKind, ...]:
    """The kinds holding the run's metrics: the database's rows as one, or one per key."""
    if uri is None:
        return sftp_store_kinds(_over_ssh(reader), run_id)
    if is_file_store(uri):
        return file_store_kinds(uri, run_id)
    if is_server(uri):
        return server_kinds(uri, run_id)
    return (mlflow_kind(uri, run_id),)


def mlflow_status(uri: str | None, run_id: str, reader: MetricsReader) -> str | None:
    """The job status of the run's MLflow status (None: it cannot be read now)."""
    if uri is None:
        return sftp_store_status(_over_ssh(reader), run_id)
    if is_file_store(uri):
        return file_store_status(uri, run_id)
    if is_server(uri):
        return server_status(uri, run_id)
    return run_status(uri, run_id)


def _over_ssh(reader: MetricsReader) -> SSHMetricsReader:
    # Registration gives a run without `tracking_uri` an SSH source (`registry.py`).
    assert isinstance(reader, SSHMetricsReader), "an MLflow run without tracking_uri is SSH's"
    return reader
