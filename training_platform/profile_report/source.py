"""Where a profile's files come from: a `ProfileSource` lists them and streams each one.

The report never holds more of a file than it needs: small files (the
summary, op tables) are read up to a cap, traces are streamed in chunks.
`LocalProfileSource` reads a folder on this machine, regular files only and
never through a symlink (a link could lead out of the profile); the API
adapts the platform's artifact reader (local or SSH) to the same protocol.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from training_platform.callbacks.wire.schema import validate_job_id

CHUNK = 1 << 20
MAX_DEPTH = 4


@dataclass(frozen=True)
class ProfileFile:
    path: str  # relative to the profile folder, "/"-separated
    size: int
    # Seconds since the epoch (local: float; SFTP: whole seconds). With the path
    # and size, what says a cached report still describes this file.
    modified: float | None = None


class TooLargeError(Exception):
    """A file over the size the report reads whole."""


class ProfileSource(Protocol):
    label: str  # where the profile is, for messages

    def files(self) -> list[ProfileFile]:
        """Every regular file of the profile (at most a few levels deep)."""
        ...

    def open(self, path: str) -> Iterator[bytes]:
        """The file's bytes in chunks; the iterator closes the file when exhausted or closed."""
        ...


class LocalProfileSource:
    """A profile folder on this machine. Symlinked files and folders are skipped (`skipped`)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.label = str(self.directory)
        self.skipped: list[str] = []

    def files(self) -> list[ProfileFile]:
        found: list[ProfileFile] = []
        self.skipped = []
        if not self.directory.is_dir() or self.directory.is_symlink():
            return found
        for directory, subdirs, names in os.walk(self.directory, followlinks=False):
            relative = Path(directory).relative_to(self.directory)
            if len(relative.parts) >= MAX_DEPTH:
                subdirs.clear()
            for name in sorted([*names, *subdirs]):
                path = Path(directory) / name
                try:
                    info = path.lstat()
                except OSError:
                    continue
                rel = path.relative_to(self.directory).as_posix()
                if stat.S_ISLNK(info.st_mode):
                    self.skipped.append(rel)
                elif stat.S_ISREG(info.st_mode):
                    found.append(ProfileFile(rel, info.st_size, info.st_mtime))
        return sorted(found, key=lambda f: f.path)

    def open(self, path: str) -> Iterator[bytes]:
        target = self.directory / safe_path(path)
        # O_NOFOLLOW on the last component; the folders were walked without links.
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path} is not a regular file")
        return _chunks(fd)


def _chunks(fd: int) -> Iterator[bytes]:
    try:
        while data := os.read(fd, CHUNK):
            yield data
    finally:
        os.close(fd)


def safe_path(path: str) -> str:
    """`path` if it is a plain relative path inside the profile, else ValueError."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise ValueError(f"refusing path {path!r}: not a plain relative path")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"refusing path {path!r}: it could leave the profile folder")
    return path


def read_capped(source: ProfileSource, path: str, limit: int) -> bytes:
    """The whole file, or `TooLargeError` past `limit` bytes (read no further)."""
    stream = source.open(path)
    parts: list[bytes] = []
    size = 0
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise TooLargeError(f"{path} is over {limit:,} bytes")
            parts.append(chunk)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return b"".join(parts)


def iter_text_lines(chunks: Iterable[bytes], max_line: int = 1 << 20) -> Iterator[str]:
    """Decoded lines (without their ending) of a chunked UTF-8 file; a longer line is an error."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > max_line:
            raise ValueError(f"a line longer than {max_line:,} bytes")
        for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", errors="replace").rstrip("\r")


def resolve_profile_dir(path: str | os.PathLike[str], job_id: str | None = None) -> Path:
    """The profile folder: `path` itself, or ``path/{job_id}_profiles`` for a metrics folder.

    The job id must be a valid one (no ``..``, no ``/``): it names a folder inside `path`.
    """
    base = Path(path)
    if job_id is not None:
        return base / f"{validate_job_id(job_id)}_profiles"
    return base
