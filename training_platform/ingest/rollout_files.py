"""A job's rollout directory (`ingest/rollout_lines.py`), listed and read, local or over SFTP.

A step file is written whole, once (or again, whole, by a resumed run), so
it is read whole: `read` answers its bytes only when they are one finished
version of the file, else says why not:

- ``changing``: its size or modification time moved while it was read, or
  its last line has no newline yet: the writer is at work; the next sync
  reads it again;
- ``too_big``: over the caller's limit; never read into memory;
- ``refused``: a symbolic link (unless PLATFORM_FOLLOW_SYMLINKS, as for the
  job's other files), a FIFO, a directory: never opened as a file.

The local directory is opened once per sync (`with source:`) and every file
is opened from that descriptor with O_NOFOLLOW and O_NONBLOCK, so a file
swapped for a symlink or a FIFO after the listing is refused, not followed
or waited on. The default directory, `{job_id}_rollouts/` next to the
metrics file, must not itself be a symlink (unless allowed); one given at
registration was resolved then. Over SSH the type is looked at (lstat)
before the open, and what was opened compared with it (`sftp_open.py`).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, Self

import paramiko

from training_platform.errors import MetricsSourceError, SourceRefusedError
from training_platform.ingest.readers import SYMLINK_REFUSED, NotRegularFileError
from training_platform.ingest.rollout_lines import ROLLOUTS_SUFFIX, step_of_name
from training_platform.ingest.sftp_open import (
    FileSwappedError,
    SymlinkRefusedError,
    open_remote_regular,
)
from training_platform.ingest.ssh import SSHConnection, sftp_read_at

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC

Outcome = Literal["ok", "changing", "too_big", "refused"]


@dataclass(frozen=True)
class RolloutEntry:
    """A step file as the listing saw it (lstat, or stat when symlinks are followed)."""

    name: str
    step: int
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class RolloutRead:
    outcome: Outcome
    size: int  # as the open file said (for "ok": the size of `data`)
    mtime_ns: int
    data: bytes = b""
    reason: str = ""  # why, for "too_big" and "refused"


def default_rollout_dir(metrics_dir: str, job_id: str) -> str:
    return os.path.join(metrics_dir, f"{job_id}{ROLLOUTS_SUFFIX}")


def local_rollout_dir(
    job_id: str,
    metrics_dir: str | None,
    rollout_dir: str | None,
    listing: dict[str, int] | None = None,
) -> str | None:
    """The local directory whose changes a local job's quiet-round signature includes.

    The registered one, else the default next to the metrics file; with
    `listing` (of the metrics directory) the default only when it is there.
    """
    if rollout_dir is not None:
        return rollout_dir
    if metrics_dir is None:
        return None
    if listing is not None and f"{job_id}{ROLLOUTS_SUFFIX}" not in listing:
        return None
    return default_rollout_dir(metrics_dir, job_id)


class RolloutSource(ABC):
    """One rollout directory. Use as ``with source:`` around `list` and `read`."""

    where: str  # the directory, for messages

    @abstractmethod
    def list(self) -> list[RolloutEntry]:
        """The `{step}.jsonl` entries, in step order; [] when the directory does not
        exist. Raises `MetricsSourceError` when it cannot be listed or is refused."""

    @abstractmethod
    def read(self, entry: RolloutEntry, limit: int) -> RolloutRead:
        """The whole file, when it is one finished version of at most `limit` bytes.
        Raises `MetricsSourceError` when it cannot be read now (retried later)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:  # noqa: B027  (only a local directory holds anything)
        """Release what the listing opened."""


def _finished(data: bytes, before: tuple[int, int], after: tuple[int, int]) -> Outcome:
    if before != after or len(data) != before[0]:
        return "changing"
    if data and not data.endswith(b"\n"):
        return "changing"  # the last line is not finished
    return "ok"


class LocalRolloutSource(RolloutSource):
    def __init__(self, directory: str, *, default: bool, follow_symlinks: bool) -> None:
        self.where = directory
        # The default `{job_id}_rollouts/` must not be a symlink (unless allowed).
        self._nofollow_dir = default and not follow_symlinks
        self._follow = follow_symlinks
        self._fd: int | None = None

    def list(self) -> list[RolloutEntry]:
        self.close()
        flags = _DIR_FLAGS | (os.O_NOFOLLOW if self._nofollow_dir else 0)
        try:
            self._fd = os.open(self.where, flags)
        except FileNotFoundError:
            return []
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(self.where):
                raise SourceRefusedError(f"{self.where} {SYMLINK_REFUSED}") from None
            raise MetricsSourceError(f"cannot open {self.where}: {exc.strerror or exc}") from None
        entries = []
        try:
            with os.scandir(self._fd) as scan:
                for item in scan:
                    step = step_of_name(item.name)
                    if step is None:
                        continue
                    try:
                        info = item.stat(follow_symlinks=self._follow)
                    except OSError:  # removed since the listing, or a dangling link
                        continue
                    entries.append(RolloutEntry(item.name, step, info.st_size, info.st_mtime_ns))
        except OSError as exc:
            raise MetricsSourceError(f"cannot list {self.where}: {exc.strerror or exc}") from None
        return sorted(entries, key=lambda entry: entry.step)

    def read(self, entry: RolloutEntry, limit: int) -> RolloutRead:
        assert self._fd is not None, "list() first"
        flags = _FILE_FLAGS | (0 if self._follow else os.O_NOFOLLOW)
        where = os.path.join(self.where, entry.name)
        try:
            # Looked at first so that a device node is never opened (an open can
            # have side effects there); the fstat below is what decides.
            mode = os.stat(entry.name, dir_fd=self._fd, follow_symlinks=self._follow).st_mode
            if not stat.S_ISREG(mode):
                reason = SYMLINK_REFUSED if stat.S_ISLNK(mode) else "is not a regular file"
                return RolloutRead("refused", entry.size, entry.mtime_ns, reason=reason)
            fd = os.open(entry.name, flags, dir_fd=self._fd)
        except FileNotFoundError:
            return RolloutRead("changing", entry.size, entry.mtime_ns)  # removed: look again
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # swapped for a symlink since the look
                return RolloutRead("refused", entry.size, entry.mtime_ns, reason=SYMLINK_REFUSED)
            raise MetricsSourceError(f"cannot open {where}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            before = (info.st_size, info.st_mtime_ns)
            if not stat.S_ISREG(info.st_mode):
                return RolloutRead("refused", *before, reason="is not a regular file")
            if info.st_size > limit:
                return RolloutRead("too_big", *before, reason=f"is over {limit} bytes")
            data = _read_all(fd, info.st_size + 1)  # one byte more: did it grow?
            after = os.fstat(fd)
            outcome = _finished(data, before, (after.st_size, after.st_mtime_ns))
            return RolloutRead(outcome, *before, data=data if outcome == "ok" else b"")
        except OSError as exc:
            raise MetricsSourceError(f"cannot read {where}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_all(fd: int, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        data = os.pread(fd, size - got, got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


class SSHRolloutSource(RolloutSource):
    """A rollout directory on the job's SSH host, over the job reader's connection."""

    def __init__(self, connection: SSHConnection, directory: str, *, follow_symlinks: bool):
        self.connection = connection
        self.directory = directory
        self.where = f"{connection.target.address}:{directory}"
        self._follow = follow_symlinks

    def list(self) -> list[RolloutEntry]:
        def listing(sftp: paramiko.SFTPClient) -> list[RolloutEntry]:
            try:
                found = sftp.listdir_attr(self.directory)
            except FileNotFoundError:
                return []
            except PermissionError as exc:
                raise MetricsSourceError(f"cannot list {self.where}: {exc}") from None
            entries = []
            for attrs in found:
                name = str(attrs.filename)
                step = step_of_name(name)
                if step is None:
                    continue
                if self._follow and stat.S_ISLNK(attrs.st_mode or 0):
                    try:  # listdir_attr describes a link itself; its target is what counts
                        attrs = sftp.stat(posixpath.join(self.directory, name))
                    except (FileNotFoundError, PermissionError):
                        continue
                mtime_ns = int(attrs.st_mtime or 0) * 1_000_000_000
                entries.append(RolloutEntry(name, step, attrs.st_size or 0, mtime_ns))
            return sorted(entries, key=lambda entry: entry.step)

        return self.connection.run(listing)

    def read(self, entry: RolloutEntry, limit: int) -> RolloutRead:
        path = posixpath.join(self.directory, entry.name)

        def read(sftp: paramiko.SFTPClient) -> RolloutRead:
            try:
                # A symlink swapped in around the open is caught too (`sftp_open.py`).
                file, _ = open_remote_regular(sftp, path, path, follow_symlinks=self._follow)
            except SymlinkRefusedError:
                return RolloutRead("refused", entry.size, entry.mtime_ns, reason=SYMLINK_REFUSED)
            except NotRegularFileError:
                reason = "is not a regular file"
                return RolloutRead("refused", entry.size, entry.mtime_ns, reason=reason)
            except (FileNotFoundError, FileSwappedError):  # being replaced: look again later
                return RolloutRead("changing", entry.size, entry.mtime_ns)
            except PermissionError as exc:
                raise MetricsSourceError(f"cannot open {self.where}/{entry.name}: {exc}") from None
            with file:
                before = _remote_stat(file)
                if before[0] > limit:
                    return RolloutRead("too_big", *before, reason=f"is over {limit} bytes")
                data = sftp_read_at(file, 0, before[0] + 1)  # one byte more: did it grow?
                outcome = _finished(data, before, _remote_stat(file))
                return RolloutRead(outcome, *before, data=data if outcome == "ok" else b"")

        return self.connection.run(read)


def _remote_stat(file: paramiko.SFTPFile) -> tuple[int, int]:
    info = file.stat()
    return info.st_size or 0, int(info.st_mtime or 0) * 1_000_000_000


def local_source(
    job_id: str, metrics_dir: str | None, rollout_dir: str | None, *, follow_symlinks: bool
) -> LocalRolloutSource | None:
    directory = local_rollout_dir(job_id, metrics_dir, rollout_dir)
    if directory is None:
        return None
    return LocalRolloutSource(
        directory, default=rollout_dir is None, follow_symlinks=follow_symlinks
    )
