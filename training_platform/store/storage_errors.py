"""A database that cannot be used right now, as the platform's `StorageError`.

A full disk under SQLite (SQLITE_FULL) or PostgreSQL (SQLSTATE 53100), a
server that went away, a file that cannot be opened: the drivers raise them
as OperationalError, which reached the API as a 500 (issue 23 §5). They are
conditions of the storage, not bugs: every write path commits its rows
together with its offsets, so nothing committed is lost and nothing
uncommitted counts as read, and the request can be tried again.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import psycopg
from sqlalchemy import exc as sa_exc

from training_platform.errors import StorageError

_SQLITE_FULL: Final = 13  # sqlite3.SQLITE_FULL (named there only from Python 3.11 on)
_MAX_DETAIL: Final = 300


def is_disk_full(error: BaseException) -> bool:
    """Whether the database refused a write because its disk is full."""
    cause = error.orig if isinstance(error, sa_exc.DBAPIError) and error.orig else error
    if isinstance(cause, psycopg.errors.DiskFull):
        return True
    if isinstance(cause, sqlite3.Error):
        return getattr(cause, "sqlite_errorcode", None) == _SQLITE_FULL or (
            "database or disk is full" in str(cause)
        )
    return False


# SQLite raises OperationalError for bad SQL too ("no such column", a MATCH
# syntax error): those are bugs, and must stay 500s. These are conditions.
_SQLITE_CONDITIONS: Final = (
    "database or disk is full",
    "database is locked",
    "disk i/o error",
    "unable to open database file",
    "attempt to write a readonly database",
)
# PostgreSQL: connection exceptions (08), insufficient resources (53: disk full,
# out of memory, too many connections), operator intervention (57: shutdown,
# cancelled), system errors (58: I/O).
_POSTGRES_CLASSES: Final = ("08", "53", "57", "58")


def _is_condition(cause: BaseException) -> bool:
    if isinstance(cause, psycopg.Error):
        state = cause.sqlstate
        # No SQLSTATE: the client could not reach the server at all.
        return state is None or state[:2] in _POSTGRES_CLASSES
    if isinstance(cause, sqlite3.Error):
        text = str(cause).lower()
        return any(condition in text for condition in _SQLITE_CONDITIONS)
    return False


def storage_error(error: sa_exc.OperationalError) -> StorageError | None:
    """The `StorageError` to answer for `error`, saying what the driver said (its
    first line only: no statement, no parameters); None when `error` is not a
    condition of the storage but a bug (bad SQL), which must stay a 500."""
    cause = error.orig if error.orig is not None else error
    lines = str(cause).strip().splitlines()
    said = f"{type(cause).__name__}: {lines[0] if lines else ''}"[:_MAX_DETAIL]
    if is_disk_full(error):
        return StorageError(
            f"the database's disk is full ({said}); what was stored is kept, and the "
            "files are read on from the stored offsets once there is room"
        )
    if not _is_condition(cause):
        return None
    return StorageError(f"the database cannot be used right now ({said})")
