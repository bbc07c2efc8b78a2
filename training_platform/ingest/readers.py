"""Incremental readers of a job's files: its line files (``{job_id}_metrics.jsonl``
and the other kinds of `ingest/file_kinds.py`) and ``{job_id}_status.json``.

Works like a file tailer (pygtail, Fluent Bit's tail input): the caller keeps a
`ReadPosition` (byte offset + fingerprint of the file's first bytes) and commits
it together with the records it got, so a crash between read and commit just
reads the same lines again. Every read seeks to the offset and reads only new
bytes, so its cost does not depend on how long the file already is.

The rules about lines live in `line_scanner.scan_lines`, shared by both
readers; a reader only supplies "read `size` bytes at `offset`" for its kind
of file (a local descriptor or an SFTP handle).

Only regular files are read: a FIFO is refused without being waited on
(local: O_NONBLOCK; remote: its type is looked at before the open), and a
symlink in place of a job's file is refused unless `follow_symlinks`
(PLATFORM_FOLLOW_SYMLINKS), with a reason that ends up in the job's
`last_sync_error` (docs/platform.md, "Files the server reads").
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from training_platform.callbacks.wire.lines import decode_line
from training_platform.callbacks.wire.schema import JOB_ID_PATTERN, validate_job_id
from training_platform.errors import MetricsSourceError, SourceRefusedError
from training_platform.ingest.file_kinds import LineFileKind, ScanFile
from training_platform.ingest.line_scanner import (
    Decode,
    ReadAt,
    ReadBatch,
    ReadPosition,
    scan_lines,
)

logger = logging.getLogger(__name__)

METRICS_SUFFIX: Final = "_metrics.jsonl"
STATUS_SUFFIX: Final = "_status.json"
STATUS_MAX_BYTES: Final = 1 << 20
UNREAD: Final = object()  # `MetricsReader.run_file_seen` before the first read

__all__ = [
    "LocalMetricsReader",
    "MetricsReader",
    "ReadBatch",
    "ReadPosition",
    "discover_job_ids",
]


def _as_position(position: ReadPosition | int) -> ReadPosition:
    if isinstance(position, ReadPosition):
        return position
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError(f"position must be a ReadPosition or an offset >= 0, got {position!r}")
    return ReadPosition(offset=position)


def _line_scan(decode: Decode, reader: MetricsReader) -> ScanFile:
    """The line scanner as a kind's `scan`, with the reader's line limit."""

    def scan(read_at: ReadAt, size: int, start: ReadPosition, limit: int) -> ReadBatch:
        return scan_lines(
            read_at, size, start, max_line_bytes=reader.max_line_bytes, max_bytes=limit,
            decode=decode,
        )  # fmt: skip

    return scan


def parse_status(data: bytes, where: str) -> dict[str, Any] | None:
    """A status file's JSON object, or None (logged) when it is not one."""
    try:
        status = json.loads(data.decode("utf-8-sig"))  # accepts NaN/Infinity tokens
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        logger.warning("ignoring unparsable status file %s: %s", where, exc)
        return None
    if not isinstance(status, dict):
        logger.warning("ignoring status file %s: not a JSON object", where)
        return None
    return status


def discover_job_ids(directory: Path) -> list[str]:
    """Job ids of the ``{job_id}_metrics.jsonl`` files in `directory` (not recursive).

    Names whose id does not match the job id pattern are ignored; a missing
    directory has no jobs.
    """
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        job_id = entry.name.removesuffix(METRICS_SUFFIX)
        if job_id != entry.name and JOB_ID_PATTERN.fullmatch(job_id) and entry.is_file():
            found.append(job_id)
    return sorted(found)


class MetricsReader(ABC):
    """Reads one job's files. Subclasses only say how to reach the bytes."""

    job_id: str

    def __init__(self, job_id: str, *, max_line_bytes: int, max_bytes: int) -> None:
        self.job_id = validate_job_id(job_id)  # it becomes part of a path
        if max_line_bytes < 1 or max_bytes < 1:
            raise ValueError("max_line_bytes and max_bytes must be >= 1")
        self.max_line_bytes = max_line_bytes
        self.max_bytes = max_bytes
        # The run file's signature when ingest/run_file.py last read it (UNREAD: never).
        self.run_file_seen: object = UNREAD

    def read_metrics_incremental(
        self, position: ReadPosition | int = 0, *, max_bytes: int | None = None
    ) -> ReadBatch:
        """`read_incremental` of the metrics file (which must exist)."""
        name = f"{self.job_id}{METRICS_SUFFIX}"
        return self._read(name, "metrics", _line_scan(decode_line, self), True, position, max_bytes)

    def read_incremental(
        self, kind: LineFileKind, position: ReadPosition | int = 0, *, max_bytes: int | None = None
    ) -> ReadBatch:
        """Records of the complete lines of the `kind` file after `position`, and where
        to continue.

        An int is an offset without fingerprint (a first read). A truncated or
        replaced file is read from byte 0 with ``reset=True``. Reads at most
        about `max_bytes` (default: the reader's); ``at_eof=False`` means call
        again with the returned position. Raises `MetricsSourceError` when the
        file cannot be reached, or is missing and `kind.required`; nothing is
        consumed then. A missing optional file reads as nothing new. A kind
        whose file is not lines is read by its own `scan`, with the same promises.
        """
        if kind.query is not None:  # a database: queried in place, not read by bytes
            return kind.query(_as_position(position), max_bytes or self.max_bytes)
        name = kind.file_name(self.job_id)
        scan = kind.scan if kind.scan is not None else _line_scan(kind.decode, self)
        return self._read(name, kind.name, scan, kind.required, position, max_bytes)

    def _read(
        self,
        name: str,
        what: str,
        scan: ScanFile,
        required: bool,
        position: ReadPosition | int,
        max_bytes: int | None,
    ) -> ReadBatch:
        start = _as_position(position)
        limit = self.max_bytes if max_bytes is None else max_bytes
        if limit < 1:
            raise ValueError(f"max_bytes must be >= 1, got {limit}")
        try:
            return self._with_file(
                name, what, lambda read_at, size: scan(read_at, size, start, limit)
            )
        except MissingFileError:
            if required:
                raise
            return ReadBatch(records=[], position=start)

    def read_status(self) -> dict[str, Any] | None:
        """The parsed status file; None when absent or unparsable (logged)."""
        data = self.read_small_file(STATUS_SUFFIX, STATUS_MAX_BYTES + 1)
        if data is None:
            return None
        if len(data) > STATUS_MAX_BYTES:
            logger.warning(
                "ignoring status file %s: over %d bytes", self.status_location, len(data)
            )
            return None
        return parse_status(data, self.status_location)

    @abstractmethod
    def metrics_file_exists(self) -> bool: ...

    @property
    @abstractmethod
    def status_location(self) -> str:
        """Where the status file is, for messages."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the reader must not be used afterwards."""

    @abstractmethod
    def _with_file(
        self, name: str, what: str, scan: Callable[[ReadAt, int], ReadBatch]
    ) -> ReadBatch:
        """Open the file `name` of the job's directory afresh, call ``scan(read_at,
        size)``, close it.

        `what` names the file in errors ("metrics file ... does not exist").

        Opened on every call, never kept open: a file replaced by rename must
        be seen as the new file, which a kept-open handle would hide.
        """

    @abstractmethod
    def read_small_file(self, suffix: str, limit: int) -> bytes | None:
        """Up to `limit` bytes of the job's `suffix` file (status, run file), read
        whole; None when it does not exist or is not a regular file (logged).

        Raises `MetricsSourceError` when it is a refused symlink, or exists but may
        not be read (permission denied): said on the job as for the metrics file.
        """

    @abstractmethod
    def file_signature(self, suffix: str) -> tuple[int, ...] | None:
        """Size, mtime and inode of the job's `suffix` file; None when it does not exist."""

    @abstractmethod
    def location(self, suffix: str) -> str:
        """Where the job's `suffix` file is, for messages."""

    # Whether `list_names` costs no more than a system call (no network round trip).
    cheap_listing: bool = False

    @abstractmethod
    def list_names(self, prefix: str, under: str = "") -> list[str]:
        """The names in the job's directory (or its subdirectory `under`) that start
        with `prefix` (one listing)."""

    @abstractmethod
    def list_directories(self) -> list[str]:
        """The subdirectories of the job's directory, hidden ones and symlinks aside."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _pread(fd: int, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]  # a short read before end of file is legal; finish it
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class NotRegularFileError(SourceRefusedError):
    """A FIFO, directory or device where a job's file should be."""


class MissingFileError(MetricsSourceError):
    """The job's file does not exist (an error only for a required kind)."""


SYMLINK_REFUSED: Final = (
    "is a symbolic link; refusing to follow it (set PLATFORM_FOLLOW_SYMLINKS=true to allow)"
)


def _open_regular(path: Path, *, follow_symlinks: bool) -> tuple[int, int]:
    """Open `path` for reading; return (fd, size). Refuses anything but a regular file.

    Without `follow_symlinks` a symlink in place of the file is refused
    (`SourceRefusedError`): O_NOFOLLOW decides at the open itself, so a link
    swapped in after any earlier look is refused too. Anything but a regular
    file is `NotRegularFileError`.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    # O_NONBLOCK: opening a FIFO planted under the job's name must not hang us.
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks and path.is_symlink():
            raise SourceRefusedError(f"{path} {SYMLINK_REFUSED}") from None
        raise
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegularFileError(f"{path} is not a regular file")
    return fd, info.st_size


class LocalMetricsReader(MetricsReader):
    """Reads ``{directory}/{job_id}_metrics.jsonl`` on this machine."""

    cheap_listing = True  # one scandir, no round trip

    def __init__(
        self,
        job_id: str,
        directory: Path | str,
        *,
        max_line_bytes: int = 1 << 20,
        max_bytes: int = 8 << 20,
        follow_symlinks: bool = False,
    ) -> None:
        super().__init__(job_id, max_line_bytes=max_line_bytes, max_bytes=max_bytes)
        self.follow_symlinks = follow_symlinks
        self.directory = Path(directory)
        self.metrics_path = self.directory / f"{self.job_id}{METRICS_SUFFIX}"
        self.status_path = self.directory / f"{self.job_id}{STATUS_SUFFIX}"

    def _with_file(
        self, name: str, what: str, scan: Callable[[ReadAt, int], ReadBatch]
    ) -> ReadBatch:
        path = self.directory / name
        try:
            fd, size = _open_regular(path, follow_symlinks=self.follow_symlinks)
        except FileNotFoundError:
            raise MissingFileError(f"{what} file {path} does not exist") from None
        except OSError as exc:
            raise MetricsSourceError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            return scan(lambda offset, n: _pread(fd, offset, n), size)
        except OSError as exc:
            raise MetricsSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def read_small_file(self, suffix: str, limit: int) -> bytes | None:
        path = self.directory / f"{self.job_id}{suffix}"
        try:
            fd, _ = _open_regular(path, follow_symlinks=self.follow_symlinks)
        except FileNotFoundError:
            return None
        except PermissionError as exc:
            # Aloud, as for an unreadable metrics file: ignored (a warning at every
            # sync), the run's status and metadata went stale with no word on the job.
            raise MetricsSourceError(f"cannot open {path}: {exc.strerror or exc}") from None
        except (OSError, NotRegularFileError) as exc:  # a symlink is still refused, aloud
            logger.warning("cannot read %s: %s", path, exc)
            return None
        try:
            return _pread(fd, 0, limit)
        finally:
            os.close(fd)

    def metrics_file_exists(self) -> bool:
        return self.metrics_path.is_file()

    def file_signature(self, suffix: str) -> tuple[int, ...] | None:
        path = self.directory / f"{self.job_id}{suffix}"
        try:
            info = os.stat(path) if self.follow_symlinks else os.lstat(path)
        except OSError:
            return None
        return (info.st_size, info.st_mtime_ns, info.st_ino)

    def location(self, suffix: str) -> str:
        return str(self.directory / f"{self.job_id}{suffix}")

    def list_names(self, prefix: str, under: str = "") -> list[str]:
        return [name for name, _ in self._entries(under) if name.startswith(prefix)]

    def list_directories(self) -> list[str]:
        return [name for name, is_dir in self._entries("") if is_dir and name[:1] != "."]

    def _entries(self, under: str) -> list[tuple[str, bool]]:
        directory = self.directory / under if under else self.directory
        try:
            with os.scandir(directory) as entries:
                return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        except OSError as exc:
            raise MetricsSourceError(f"cannot list {directory}: {exc.strerror or exc}") from None

    @property
    def status_location(self) -> str:
        return str(self.status_path)

    def close(self) -> None:
        pass  # every call opens and closes its own file: nothing is held
