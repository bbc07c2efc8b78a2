"""`LineFile`: an append-only JSONL file written in batches (the metrics and samples files).

Lines are gathered by the writer and handed to the OS with one `os.write` on
an ``O_APPEND`` descriptor. The file is never truncated: a resumed run
appends, and if a crash left a partial last line, a ``\\n`` ends it before
the first new line (readers then skip the broken line, not ours).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson


class LineFile:
    """An append-only JSONL file: lines gathered, then handed to the OS in one write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[bytes] = []
        self.fd: int | None = None

    def flush(self) -> None:
        """Hand every gathered line to the OS (one `os.write`; no fsync)."""
        lines = self.lines
        if not lines:
            return
        self.lines = []
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        fd = self.fd if self.fd is not None else self._open()
        # One os.write on an O_APPEND descriptor: the lines reach the OS in one
        # piece (a reader never sees one half-written unless the disk is full).
        written = os.write(fd, data)
        while written < len(data):
            data = data[written:]
            written = os.write(fd, data)

    def _open(self) -> int:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        needs_newline = False
        try:
            with path.open("rb") as existing:
                existing.seek(0, os.SEEK_END)
                if existing.tell() > 0:
                    existing.seek(-1, os.SEEK_END)
                    needs_newline = existing.read(1) != b"\n"
        except FileNotFoundError:
            pass
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if needs_newline:
            # A crash left a partial last line: end it, so that our first line
            # is not glued onto it (readers skip the broken line, not ours).
            os.write(self.fd, b"\n")
        return self.fd

    def fsync(self) -> None:
        self.flush()
        if self.fd is not None:
            os.fsync(self.fd)

    def close(self, fsync: bool) -> None:
        self.flush()
        if self.fd is not None:
            if fsync:
                os.fsync(self.fd)
            os.close(self.fd)
            self.fd = None


def write_json_atomic(path: Path, payload: Mapping[str, Any], *, fsync: bool = False) -> None:
    """Write `payload` to a temp file next to `path`, then rename it over `path`.

    A concurrent reader sees the old file or the new one, never a mix: rename
    within one directory is atomic on POSIX, and on Windows `os.replace` is
    retried while a reader holds the file open.
    """
    data = orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    for attempt in range(20):
        try:
            os.replace(tmp, path)
            return
        except PermissionError:  # Windows: a reader has the file open right now
            if attempt == 19:
                raise
            time.sleep(0.005)
