"""Find the records of a batch that the database refuses, so the others still land.

`store/storable.py` fixes every value we know a database refuses; this is the
safety net for the ones we do not. When a batch fails with a *data* error (not
a lost connection or a full disk, which must fail the sync and be retried),
the persister bisects it with trial transactions that are always rolled back,
until each refused record is alone, then commits the batch without them.
Bisection costs about 2·k·log2(n) trials for k bad records among n, instead
of n trials record by record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from sqlalchemy import exc as sa_exc

T = TypeVar("T")

# Raised for a value, never for the connection or the server's state:
# Python-side conversion (sqlite3 and psycopg adapt values in Python) and the
# drivers' DataError (PostgreSQL's class 22: bad text, out of range, too long).
_VALUE_ERRORS = (
    ValueError,
    TypeError,
    OverflowError,
    UnicodeError,
    RecursionError,
    psycopg.DataError,
    sqlite3.DataError,
)


def is_data_error(error: BaseException) -> bool:
    """True when `error` is about a value written, so skipping that record can help."""
    if isinstance(error, sa_exc.DataError):
        return True
    if isinstance(error, sa_exc.StatementError):  # SQLAlchemy's wrapper: judge the cause
        cause = error.orig
        return cause is not None and isinstance(cause, _VALUE_ERRORS)
    return isinstance(error, _VALUE_ERRORS)


def describe(error: BaseException) -> str:
    """One line saying why a record was refused (the cause, not SQLAlchemy's wrapper)."""
    cause = error.orig if isinstance(error, sa_exc.StatementError) and error.orig else error
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {text}"[:300]


def find_unstorable(
    items: Sequence[T], fails: Callable[[Sequence[T]], BaseException | None]
) -> dict[int, BaseException]:
    """Indexes of the items that `fails` alone, with their error.

    `fails(subset)` tries to store `subset` (and rolls back), returning the
    data error or None. `items` as a whole is known to fail. When two halves
    each succeed but fail together, nothing is singled out (an empty answer):
    the caller then treats the batch as unsplittable.
    """
    bad: dict[int, BaseException] = {}

    def search(start: int, stop: int, error: BaseException) -> None:
        if stop - start == 1:
            bad[start] = error
            return
        middle = (start + stop) // 2
        for low, high in ((start, middle), (middle, stop)):
            half_error = fails(items[low:high])
            if half_error is not None:
                search(low, high, half_error)

    if items:
        first_error = fails(items)
        if first_error is not None:
            search(0, len(items), first_error)
    return bad


def probe_error(attempt: Callable[[], Any]) -> BaseException | None:
    """Run `attempt`; its data error, or None. Other errors propagate."""
    try:
        attempt()
    except Exception as error:
        if is_data_error(error):
            return error
        raise
    return None
