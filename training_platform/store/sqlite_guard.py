"""SQLite keeps one server process: a second `serve` on the same file is refused.

Several processes on one SQLite file would each ingest (the offset
compare-and-swap keeps rows exactly once) but each would stream to its live
clients only what it ingested itself: live charts with holes. Leases and the
cross-process live path are PostgreSQL's (DESIGN.md §9). So a server holds an
exclusive lock on `<database>.server.lock` for as long as it runs; the kernel
drops the lock when the process dies, however it dies, so a crashed server
never blocks the next one. The file names the holder's pid for the message.

Apps built inside one process (tests do) share the lock: the second one is
the same process, which the outside world sees as one server.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from training_platform.errors import PlatformError


class SecondServerError(PlatformError):
    """Another server process already serves this SQLite database."""


_guard = threading.Lock()
_held: dict[Path, tuple[int, int]] = {}  # lock file -> (fd, apps of this process using it)


def lock_path_of(database_url: str) -> Path | None:
    """The lock file of a SQLite database file; None for other databases or `:memory:`."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(f"{Path(url.database).resolve()}.server.lock")


@contextlib.contextmanager
def sole_server(database_url: str) -> Iterator[None]:
    """Hold the database's server lock for the block; `SecondServerError` if another
    process holds it. A no-op for PostgreSQL, which several processes may share."""
    path = lock_path_of(database_url)
    if path is None:
        yield
        return
    _acquire(path)
    try:
        yield
    finally:
        _release(path)


def _acquire(path: Path) -> None:
    with _guard:
        if path in _held:
            fd, users = _held[path]
            _held[path] = (fd, users + 1)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SecondServerError(
                f"another training-platform server (pid {holder}) is serving this SQLite "
                f"database ({path.name.removesuffix('.server.lock')}): SQLite keeps one "
                "server process. Stop it first, or run several processes on PostgreSQL "
                "(docs/platform.md, 'Several processes')."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        _held[path] = (fd, 1)


def _release(path: Path) -> None:
    with _guard:
        fd, users = _held[path]
        if users > 1:
            _held[path] = (fd, users - 1)
            return
        del _held[path]
        os.close(fd)  # closing the descriptor drops the lock
