"""The reader of a job's files on an SSH host, over SFTP (see `ingest/readers.py`)."""

from __future__ import annotations

import logging
import posixpath
import stat
from collections.abc import Callable

import paramiko

from training_platform.errors import MetricsSourceError
from training_platform.ingest.line_scanner import ReadAt, ReadBatch
from training_platform.ingest.readers import (
    METRICS_SUFFIX,
    STATUS_SUFFIX,
    MetricsReader,
    MissingFileError,
    NotRegularFileError,
)
from training_platform.ingest.sftp_open import open_remote_regular
from training_platform.ingest.ssh import SSHConnection, SSHTarget, sftp_read_at

logger = logging.getLogger(__name__)


class SSHMetricsReader(MetricsReader):
    """Reads ``{remote_dir}/{job_id}_metrics.jsonl`` on an SSH host over SFTP.

    Keeps one connection, re-established when it drops (see `SSHConnection`):
    a read that fails half-way is run again from the caller's position, and
    one that gives up has consumed nothing, so the caller retries later with
    the position it committed. `attempts` and `backoff` bound each call.
    """

    def __init__(
        self,
        job_id: str,
        remote_dir: str,
        target: SSHTarget,
        *,
        max_line_bytes: int = 1 << 20,
        max_bytes: int = 8 << 20,
        attempts: int = 3,
        backoff: float = 0.5,
        follow_symlinks: bool = False,
    ) -> None:
        super().__init__(job_id, max_line_bytes=max_line_bytes, max_bytes=max_bytes)
        self.follow_symlinks = follow_symlinks
        self.target = target
        self.remote_dir = remote_dir
        self.metrics_path = posixpath.join(remote_dir, f"{self.job_id}{METRICS_SUFFIX}")
        self.status_path = posixpath.join(remote_dir, f"{self.job_id}{STATUS_SUFFIX}")
        self.connection = SSHConnection(target, attempts=attempts, backoff=backoff)

    def _with_file(
        self, name: str, what: str, scan: Callable[[ReadAt, int], ReadBatch]
    ) -> ReadBatch:
        path = posixpath.join(self.remote_dir, name)
        where = f"{self.target.address}:{path}"

        def read(sftp: paramiko.SFTPClient) -> ReadBatch:
            try:
                file, size = self._open(sftp, path, where)
            except FileNotFoundError:
                raise MissingFileError(f"{what} file {where} does not exist") from None
            except PermissionError as exc:
                raise MetricsSourceError(f"cannot open {where}: {exc}") from None
            with file:
                return scan(lambda offset, n: sftp_read_at(file, offset, n), size)

        return self.connection.run(read)

    def _open(
        self, sftp: paramiko.SFTPClient, path: str, where: str
    ) -> tuple[paramiko.SFTPFile, int]:
        """The job's file, opened: a regular file, no symlink unless allowed, and the
        file the path named around the open (`sftp_open.py`: SFTP cannot refuse a
        link at the open itself)."""
        return open_remote_regular(sftp, path, where, follow_symlinks=self.follow_symlinks)

    def read_small_file(self, suffix: str, limit: int) -> bytes | None:
        path = posixpath.join(self.remote_dir, f"{self.job_id}{suffix}")
        where = self.location(suffix)

        def read(sftp: paramiko.SFTPClient) -> bytes | None:
            try:
                file, _ = self._open(sftp, path, where)
            except FileNotFoundError:
                return None
            except PermissionError as exc:  # aloud, as the local reader does
                raise MetricsSourceError(f"cannot open {where}: {exc}") from None
            with file:
                data: bytes = file.read(limit)
                return data

        try:
            return self.connection.run(read)
        except NotRegularFileError as exc:  # as for a local one: ignored, logged
            logger.warning("cannot read %s: %s", where, exc)
            return None

    def file_signature(self, suffix: str) -> tuple[int, ...] | None:
        path = posixpath.join(self.remote_dir, f"{self.job_id}{suffix}")

        def check(sftp: paramiko.SFTPClient) -> tuple[int, ...] | None:
            try:
                info = sftp.stat(path) if self.follow_symlinks else sftp.lstat(path)
            except (FileNotFoundError, PermissionError):
                return None
            # SFTP gives mtime in whole seconds: the size tells most rewrites apart.
            return (info.st_size or 0, info.st_mtime or 0, 0)

        return self.connection.run(check)

    def location(self, suffix: str) -> str:
        return f"{self.target.address}:{posixpath.join(self.remote_dir, self.job_id + suffix)}"

    def list_names(self, prefix: str, under: str = "") -> list[str]:
        return [name for name, _ in self._entries(under) if name.startswith(prefix)]

    def list_directories(self) -> list[str]:
        return [name for name, is_dir in self._entries("") if is_dir and name[:1] != "."]

    def _entries(self, under: str) -> list[tuple[str, bool]]:
        directory = posixpath.join(self.remote_dir, under) if under else self.remote_dir

        def listing(sftp: paramiko.SFTPClient) -> list[tuple[str, bool]]:
            try:
                entries = sftp.listdir_attr(directory)
            except (FileNotFoundError, PermissionError) as exc:
                where = f"{self.target.address}:{directory}"
                raise MetricsSourceError(f"cannot list {where}: {exc}") from None
            return [(entry.filename, stat.S_ISDIR(entry.st_mode or 0)) for entry in entries]

        return self.connection.run(listing)

    def metrics_file_exists(self) -> bool:
        def check(sftp: paramiko.SFTPClient) -> bool:
            try:
                return stat.S_ISREG(sftp.stat(self.metrics_path).st_mode or 0)
            except FileNotFoundError:
                return False

        return self.connection.run(check)

    @property
    def status_location(self) -> str:
        return f"{self.target.address}:{self.status_path}"

    def close(self) -> None:
        self.connection.close()
