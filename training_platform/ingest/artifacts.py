"""A job's profiling artifacts: `{dir}/{job_id}_profiles/`, local or over SSH.

The trainer's profiler writes traces and tables there (`step_N/trace.json`,
`step_N/op_stats.csv`, `stage_times.json`, ...). The platform lists them and
streams single files. Only regular files reached without any symlink are
served, whatever the trainer does to the folder meanwhile:

- local: the file is opened from a descriptor of the metrics directory one
  component at a time with O_NOFOLLOW, non-blocking, and what was opened is
  checked (`safe_paths.open_regular_beneath`), so a file swapped for a symlink
  or a FIFO between a check and the open is refused, never followed or waited on;
- SSH: the remote server resolves the path (realpath) and it must be exactly
  the requested one inside the job's remote folder (no symlink at any
  component), and a regular file, before it is opened once for the download;
  what was opened is compared with it (`sftp_open.py`).
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
import re
import stat
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import paramiko

from training_platform.errors import (
    ArtifactNotFoundError,
    InvalidParameterError,
    MetricsSourceError,
)
from training_platform.ingest.readers import LocalMetricsReader, MetricsReader
from training_platform.ingest.safe_paths import NAME_MAX, PATH_MAX, open_regular_beneath
from training_platform.ingest.sftp_open import open_remote_regular
from training_platform.ingest.ssh import sftp_read_at
from training_platform.ingest.ssh_reader import SSHMetricsReader

logger = logging.getLogger(__name__)

MAX_FILES = 10_000  # a listing larger than this is cut (and says so), whatever `limit` asks
MAX_DEPTH = 6
CHUNK = 256 * 1024
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class ArtifactFile:
    path: str  # relative to the profiles folder, "/"-separated
    size: int
    modified: float


@dataclass(frozen=True)
class ArtifactListing:
    root: str  # the profiles folder's name, e.g. "run1_profiles"
    files: list[ArtifactFile]
    truncated: bool


def profiles_folder(job_id: str) -> str:
    return f"{job_id}_profiles"


def step_of(path: str) -> int | None:
    """The step of a file under `step_N/`, else None."""
    match = _STEP_DIR.match(path.split("/", 1)[0])
    return int(match.group(1)) if match and "/" in path else None


def safe_relative_path(path: str) -> str:
    """`path` normalised, or `InvalidParameterError` if it could leave the folder."""
    if not path or "\x00" in path or "\\" in path or path.startswith("/"):
        raise InvalidParameterError(f"invalid artifact path {path!r}")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidParameterError(f"invalid artifact path {path!r}: use a plain relative path")
    # Checked here, not left to the kernel: a longer name would fail deep in
    # an open (ENAMETOOLONG) with nothing useful to tell the caller.
    try:
        encoded = [part.encode("utf-8") for part in parts]
    except UnicodeEncodeError:
        raise InvalidParameterError(f"invalid artifact path {path!r}: not valid text") from None
    if max(map(len, encoded)) > NAME_MAX or sum(map(len, encoded)) + len(parts) > PATH_MAX:
        raise InvalidParameterError(
            f"artifact path too long: names are at most {NAME_MAX} bytes, paths {PATH_MAX}"
        )
    return "/".join(parts)


class ArtifactStream:
    """One opened artifact: its size, then its bytes once; `close()` releases it.

    Exactly `size` bytes at most (the Content-Length sent before them), even if
    the file grows meanwhile. Closed when iterated to the end, when `close()`
    is called, or at the latest when garbage collected (a response that was
    never started must not leak a descriptor or an SSH connection).
    """

    def __init__(self, size: int, read: Callable[[int], bytes], release: Callable[[], None]):
        self.size = size
        self._read = read
        self._release = weakref.finalize(self, release)

    def __iter__(self) -> Iterator[bytes]:
        remaining = self.size
        try:
            while remaining > 0:
                data = self._read(min(CHUNK, remaining))
                if not data:  # the file shrank: the client sees a short body
                    break
                remaining -= len(data)
                yield data
        finally:
            self.close()

    def close(self) -> None:
        self._release()


def _usable_name(name: str) -> bool:
    # A name that is not UTF-8 on disk (surrogate-escaped here) cannot go into
    # JSON, and could not be asked for by URL either.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _LocalArtifacts:
    def __init__(self, directory: Path, folder: str) -> None:
        self.directory = directory  # the job's metrics directory: trusted
        self.folder = folder
        self.base = directory / folder

    def list(self, limit: int = MAX_FILES) -> tuple[list[ArtifactFile], bool]:
        limit = min(limit, MAX_FILES)
        try:
            if not stat.S_ISDIR(self.base.lstat().st_mode):  # a symlinked folder is not listed
                return [], False
        except OSError:
            return [], False
        found: list[ArtifactFile] = []
        for directory, subdirs, names in os.walk(self.base, followlinks=False):
            depth = len(Path(directory).relative_to(self.base).parts)
            if depth >= MAX_DEPTH:
                subdirs.clear()
            subdirs[:] = [name for name in subdirs if _usable_name(name)]
            for name in sorted(filter(_usable_name, names)):
                path = Path(directory) / name
                try:
                    info = path.lstat()
                except OSError:  # removed since the directory was read
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue  # symlinks and devices are never served
                if len(found) >= limit:  # one more than fits: only now is it truncated
                    return found, True
                found.append(
                    ArtifactFile(
                        path.relative_to(self.base).as_posix(), info.st_size, info.st_mtime
                    )
                )
        return found, False

    def open(self, relative: str, keep_reader: bool = False) -> ArtifactStream:
        try:  # (`keep_reader`: a local job's reader holds no connection to keep)
            fd = open_regular_beneath(self.directory, f"{self.folder}/{relative}")
        except OSError as exc:
            # Missing, a symlink (ELOOP), a FIFO, under a file (ENOTDIR), unreadable:
            # all the same to the caller, and nothing about the outside leaks.
            logger.debug("artifact %s/%s refused: %s", self.base, relative, exc)
            raise ArtifactNotFoundError(f"artifact {relative!r} not found") from None
        return ArtifactStream(
            os.fstat(fd).st_size, functools.partial(os.read, fd), functools.partial(os.close, fd)
        )


def _is_status_error(exc: OSError, sftp: paramiko.SFTPClient) -> bool:
    """An SFTP status answer about the file (no such file, failure), not a network fault."""
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return False
    transport = sftp.get_channel().get_transport() if sftp.get_channel() else None
    return transport is not None and transport.is_active()


class _SSHArtifacts:
    def __init__(self, reader: SSHMetricsReader, base: str) -> None:
        self.reader = reader
        self.base = base

    def _real_base(self, sftp: paramiko.SFTPClient) -> str | None:
        """The folder's path as the server resolves it; None when it is not a real folder.

        The remote directory may lie behind symlinks (it is the job's
        configured place); the profiles folder inside it may not.
        """
        try:
            remote_dir = sftp.normalize(posixpath.dirname(self.base))
            expected = posixpath.join(remote_dir, posixpath.basename(self.base))
            if sftp.normalize(self.base) != expected:
                return None
            if not stat.S_ISDIR(sftp.lstat(expected).st_mode or 0):
                return None
        except OSError as exc:
            if _is_status_error(exc, sftp):
                return None
            raise
        return expected

    def list(self, limit: int = MAX_FILES) -> tuple[list[ArtifactFile], bool]:
        limit = min(limit, MAX_FILES)

        def walk(sftp: paramiko.SFTPClient) -> tuple[list[ArtifactFile], bool]:
            base = self._real_base(sftp)
            if base is None:
                return [], False
            found: list[ArtifactFile] = []
            pending = [("", 0)]
            while pending:
                relative, depth = pending.pop()
                try:
                    entries = sftp.listdir_attr(posixpath.join(base, relative))
                except FileNotFoundError:
                    continue
                for entry in sorted(entries, key=lambda e: e.filename):
                    mode = entry.st_mode or 0  # listdir_attr: lstat, symlinks look like links
                    child = posixpath.join(relative, entry.filename) if relative else entry.filename
                    if stat.S_ISDIR(mode) and depth + 1 < MAX_DEPTH:
                        pending.append((child, depth + 1))
                    elif stat.S_ISREG(mode):
                        if len(found) >= limit:  # one more than fits
                            found.sort(key=lambda f: f.path)
                            return found, True
                        found.append(ArtifactFile(child, entry.st_size or 0, entry.st_mtime or 0))
            found.sort(key=lambda f: f.path)
            return found, False

        return self.reader.connection.run(walk)

    def open(self, relative: str, keep_reader: bool = False) -> ArtifactStream:
        def not_found() -> ArtifactNotFoundError:
            return ArtifactNotFoundError(f"artifact {relative!r} not found")

        def open_checked(sftp: paramiko.SFTPClient) -> tuple[paramiko.SFTPFile, int]:
            base = self._real_base(sftp)
            if base is None:
                raise not_found()
            expected = posixpath.join(base, relative)
            try:
                # The server resolves every symlink: anything but the very path
                # asked for went through one (`step_2 -> /etc`), and is refused.
                if sftp.normalize(expected) != expected:
                    raise not_found()
                # Type checked before the open (opening a FIFO blocks the remote
                # sftp-server until a writer comes, which may be never), and what
                # was opened compared with it: a symlink swapped in for the
                # instant of the open is refused too (`sftp_open.py`).
                return open_remote_regular(sftp, expected, expected, follow_symlinks=False)
            except MetricsSourceError:
                raise not_found() from None
            except OSError as exc:
                if _is_status_error(exc, sftp):
                    raise not_found() from None
                raise

        file, size = self.reader.connection.run(open_checked)
        offset = 0

        def read(count: int) -> bytes:
            nonlocal offset
            # Every SFTP call has the connection's timeout: a host gone silent
            # ends the download with an error instead of pinning a thread.
            data = sftp_read_at(file, offset, count)
            offset += len(data)
            return data

        owned = None if keep_reader else self.reader
        return ArtifactStream(size, read, functools.partial(_close_remote, file, owned))


def _close_remote(file: paramiko.SFTPFile, reader: SSHMetricsReader | None) -> None:
    try:
        file.close()
    except Exception:  # the connection may be gone already; it is closed next anyway
        logger.debug("error closing remote artifact", exc_info=True)
    if reader is not None:
        reader.close()


def artifact_store(reader: MetricsReader) -> _LocalArtifacts | _SSHArtifacts:
    """The artifacts next to a reader's metrics file (same directory, same host)."""
    folder = profiles_folder(reader.job_id)
    if isinstance(reader, SSHMetricsReader):
        return _SSHArtifacts(reader, posixpath.join(reader.remote_dir, folder))
    assert isinstance(reader, LocalMetricsReader)
    return _LocalArtifacts(Path(reader.directory), folder)


def list_artifacts(reader: MetricsReader, limit: int = MAX_FILES) -> ArtifactListing:
    """At most `limit` files (and never more than MAX_FILES); `truncated` when more exist."""
    files, truncated = artifact_store(reader).list(limit)
    return ArtifactListing(profiles_folder(reader.job_id), files, truncated)


def open_artifact(reader: MetricsReader, path: str, *, keep_reader: bool = False) -> ArtifactStream:
    """One artifact, opened; raises ArtifactNotFoundError / InvalidParameterError.

    For an SSH job the stream owns `reader` from here on and closes it with
    itself (a download's connection lives as long as its response), unless
    `keep_reader`: a caller reading several files through one connection
    (the profile report) closes the reader itself.
    """
    return artifact_store(reader).open(safe_relative_path(path), keep_reader)
