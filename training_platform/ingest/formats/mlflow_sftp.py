"""An MLflow file store on an SSH host, read over SFTP (a job of source "ssh",
format "mlflow": `ssh.remote_dir` the store's root, `mlruns`, and its run id).

Read as the store on the server's machine is (`mlflow_files.py`: the same layout
code, the same kinds, bounds and status), through `SFTPFiles` in place of the
local file system, on the job's reader's connection (`SSHMetricsReader`: one kept
connection, re-established and the call run again when it drops). A symlink is
never followed: listings are SFTP's `lstat`s, where a link is neither a file nor
a directory, and every open is checked as the other remote opens are
(`sftp_open.py`), with symlinks refused whatever PLATFORM_FOLLOW_SYMLINKS says,
as the local store refuses them.

Each SFTP call is a network round trip: a sync costs one `lstat` (the run's
meta.yaml still there), one listing per directory of ``metrics/``, then about
six calls per metric file (the checked open, its first bytes, what is new); the
params and tags only when records were read.
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

import paramiko

from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_files import (
    Entry,
    read_about,
    run_and_keys,
    store_status,
)
from training_platform.ingest.formats.mlflow_metric_lines import (
    failing_kind,
    metric_kinds,
    scan_metric_file,
)
from training_platform.ingest.line_scanner import ReadBatch, ReadPosition
from training_platform.ingest.sftp_open import SymlinkRefusedError, open_remote_regular
from training_platform.ingest.ssh import sftp_read_at
from training_platform.ingest.ssh_reader import SSHMetricsReader

T = TypeVar("T")
NOT_FOLLOWED: Final = "is a symbolic link; MLflow writes none, so it is not followed"


class SFTPFiles:
    """A store's files through one SFTP session (`mlflow_files.StoreFiles`).

    Only SFTP's status answers (no such file, permission denied) are turned into
    "missing" here; any other error passes through, so that `SSHConnection.run`
    tells a dropped connection (tried again) from a failing server.
    """

    def __init__(self, sftp: paramiko.SFTPClient, address: str) -> None:
        self.sftp = sftp
        self.address = address

    def entries(self, directory: str) -> list[Entry] | None:
        try:
            found = self.sftp.listdir_attr(directory)
        except FileNotFoundError:
            return None
        except PermissionError as exc:
            raise MetricsSourceError(f"cannot list {self.where(directory)}: {exc}") from None
        # listdir_attr gives each entry's lstat: a symlink shows as a link.
        return [Entry(entry.filename, stat.S_ISDIR(entry.st_mode or 0),
                      stat.S_ISREG(entry.st_mode or 0)) for entry in found]  # fmt: skip

    def is_file(self, path: str) -> bool:
        try:
            return stat.S_ISREG(self.sftp.lstat(path).st_mode or 0)
        except (FileNotFoundError, PermissionError):
            return False

    def read_small(self, path: str, limit: int) -> bytes | None:
        try:
            file, _ = open_remote_regular(self.sftp, path, self.where(path), follow_symlinks=False)
        except (FileNotFoundError, PermissionError, MetricsSourceError):
            return None  # gone, unreadable, a symlink, not a regular file: as locally
        with file:
            data: bytes = file.read(limit)
            return data

    def where(self, path: str) -> str:
        return f"{self.address}:{path}"


def _on_host(reader: SSHMetricsReader, read: Callable[[SFTPFiles], T]) -> T:
    """`read` of the store's files over the reader's connection (one call at a time)."""
    address = reader.target.address
    return reader.connection.run(lambda sftp: read(SFTPFiles(sftp, address)))


def sftp_store_kinds(reader: SSHMetricsReader, run_id: str) -> tuple[LineFileKind, ...]:
    """One kind per metric file of the run in the store `reader.remote_dir`, key order."""
    root = reader.remote_dir
    try:
        run_dir, keys = _on_host(reader, lambda files: run_and_keys(files, root, run_id))
    except MetricsSourceError as exc:  # the host unreachable, the run not found
        return (failing_kind(str(exc)),)

    def read(path: str, key: str, position: ReadPosition, max_bytes: int) -> ReadBatch:
        return _on_host(reader, partial(_read_metric_file, path=path, key=key,
                                        position=position, max_bytes=max_bytes))  # fmt: skip

    def about() -> dict[str, Any]:
        return _on_host(reader, lambda files: read_about(files, run_dir))

    return metric_kinds(posixpath.join(run_dir, "metrics"), keys, read, about)


def sftp_store_status(reader: SSHMetricsReader, run_id: str) -> str | None:
    """The job status of the run's meta.yaml (None: not readable now; the metrics read
    says why)."""
    try:
        return _on_host(reader, lambda files: store_status(files, reader.remote_dir, run_id))
    except MetricsSourceError:
        return None


def _read_metric_file(
    files: SFTPFiles, *, path: str, key: str, position: ReadPosition, max_bytes: int
) -> ReadBatch:
    """The values of one metric file after `position` (a deleted file: nothing new)."""
    where = files.where(path)
    try:
        file, size = open_remote_regular(files.sftp, path, where, follow_symlinks=False)
    except FileNotFoundError:
        return ReadBatch(records=[], position=position)
    except PermissionError as exc:
        raise MetricsSourceError(f"cannot read {where}: {exc}") from None
    except SymlinkRefusedError:  # its message would point at PLATFORM_FOLLOW_SYMLINKS
        raise MetricsSourceError(f"{where} {NOT_FOLLOWED}") from None
    with file:
        read_at = partial(sftp_read_at, file)
        return scan_metric_file(read_at, size, position, max_bytes, key=key)
