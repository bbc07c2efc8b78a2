"""A job's profiling artifacts: `{dir}/{job_id}_profiles/`, local or over SSH.

The trainer's profiler writes traces and tables there (`step_N/trace.json`,
`step_N/op_stats.csv`, `stage_times.json`, ...). The platform lists them and
streams single files; both refuse any path that would leave that folder
(`..`, absolute paths, NUL, symlinks pointing outside).
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paramiko

from training_platform.core.metrics_reader import (
    LocalMetricsReader,
    MetricsReader,
    SSHMetricsReader,
)
from training_platform.errors import ArtifactNotFoundError, InvalidParameterError

MAX_FILES = 10_000  # a listing larger than this is cut (and says so)
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
    return "/".join(parts)


class _LocalArtifacts:
    def __init__(self, base: Path) -> None:
        self.base = base

    def list(self) -> tuple[list[ArtifactFile], bool]:
        if not self.base.is_dir():
            return [], False
        found: list[ArtifactFile] = []
        for directory, subdirs, names in os.walk(self.base, followlinks=False):
            depth = len(Path(directory).relative_to(self.base).parts)
            if depth >= MAX_DEPTH:
                subdirs.clear()
            for name in sorted(names):
                path = Path(directory) / name
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode):
                    continue  # symlinks and devices are never served
                found.append(
                    ArtifactFile(
                        path.relative_to(self.base).as_posix(), info.st_size, info.st_mtime
                    )
                )
                if len(found) >= MAX_FILES:
                    return found, True
        return found, False

    def open(self, relative: str) -> tuple[int, Iterator[bytes]]:
        path = self.base / relative
        # Every component must be a real directory/file inside base: no symlink hop.
        current = self.base
        for part in relative.split("/"):
            current = current / part
            if current.is_symlink():
                raise ArtifactNotFoundError(f"artifact {relative!r} not found")
        try:
            info = path.lstat()
        except FileNotFoundError:
            raise ArtifactNotFoundError(f"artifact {relative!r} not found") from None
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactNotFoundError(f"artifact {relative!r} not found")
        handle = path.open("rb")

        def chunks() -> Iterator[bytes]:
            with handle:
                while data := handle.read(CHUNK):
                    yield data

        return info.st_size, chunks()


class _SSHArtifacts:
    def __init__(self, reader: SSHMetricsReader, base: str) -> None:
        self.reader = reader
        self.base = base

    def list(self) -> tuple[list[ArtifactFile], bool]:
        def walk(sftp: paramiko.SFTPClient) -> tuple[list[ArtifactFile], bool]:
            found: list[ArtifactFile] = []
            pending = [("", 0)]
            while pending:
                relative, depth = pending.pop()
                try:
                    entries = sftp.listdir_attr(posixpath.join(self.base, relative))
                except FileNotFoundError:
                    continue
                for entry in sorted(entries, key=lambda e: e.filename):
                    mode = entry.st_mode or 0
                    child = posixpath.join(relative, entry.filename) if relative else entry.filename
                    if stat.S_ISDIR(mode) and depth + 1 < MAX_DEPTH:
                        pending.append((child, depth + 1))
                    elif stat.S_ISREG(mode):
                        found.append(ArtifactFile(child, entry.st_size or 0, entry.st_mtime or 0))
                        if len(found) >= MAX_FILES:
                            return found, True
            found.sort(key=lambda f: f.path)
            return found, False

        return self.reader.connection.run(walk)

    def open(self, relative: str) -> tuple[int, Iterator[bytes]]:
        remote = posixpath.join(self.base, relative)

        def size_of(sftp: paramiko.SFTPClient) -> int:
            try:
                info = sftp.lstat(remote)  # lstat: a symlink is refused, not followed
            except FileNotFoundError:
                raise ArtifactNotFoundError(f"artifact {relative!r} not found") from None
            if not stat.S_ISREG(info.st_mode or 0):
                raise ArtifactNotFoundError(f"artifact {relative!r} not found")
            return info.st_size or 0

        size = self.reader.connection.run(size_of)

        def chunks() -> Iterator[bytes]:
            offset = 0
            while offset < size:

                def read(sftp: paramiko.SFTPClient, at: int = offset) -> bytes:
                    with sftp.open(remote, "rb") as file:
                        file.seek(at)
                        return file.read(min(CHUNK, size - at))

                data = self.reader.connection.run(read)
                if not data:
                    break
                offset += len(data)
                yield data

        return size, chunks()


def artifact_store(reader: MetricsReader) -> _LocalArtifacts | _SSHArtifacts:
    """The artifacts next to a reader's metrics file (same directory, same host)."""
    folder = profiles_folder(reader.job_id)
    if isinstance(reader, SSHMetricsReader):
        return _SSHArtifacts(reader, posixpath.join(reader.remote_dir, folder))
    assert isinstance(reader, LocalMetricsReader)
    return _LocalArtifacts(Path(reader.directory) / folder)


def list_artifacts(reader: MetricsReader) -> ArtifactListing:
    files, truncated = artifact_store(reader).list()
    return ArtifactListing(profiles_folder(reader.job_id), files, truncated)


def open_artifact(reader: MetricsReader, path: str) -> tuple[int, Iterator[bytes]]:
    """(size, chunks) of one artifact; raises ArtifactNotFoundError / InvalidParameterError."""
    return artifact_store(reader).open(safe_relative_path(path))
