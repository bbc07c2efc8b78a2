"""Long texts stored zlib-compressed on SQLite: the samples' completions.

A completion is ~1,500 characters of prose, which zlib shrinks to about 0.45x.
On PostgreSQL the text is stored as it is: its SQL (`ILIKE`, the word index's
expression) must read it, and no SQL function there inflates zlib (its own
TOAST compresses only rows over ~2 KB, with pglz, which leaves varied prose
nearly as it was). SQLite stores what it is given, so there `StoredText`
stores the zlib stream instead (a BLOB in the TEXT column: TEXT affinity leaves BLOBs
alone, so the column's declared type stays what it was).

A stored value is either kind, and `unpack_text` reads both:

- a `str`: rows written before migration 0010, and texts zlib would not
  shrink (a short completion grows by zlib's ~11 bytes of header and
  checksum), which `pack_text` keeps as they are;
- `bytes`: a zlib stream of the UTF-8 text.

SQL that needs the text itself on SQLite (the text search's FTS5 triggers and
its `LIKE` recheck) inflates it with the SQL function `tp_text`
(`TEXT_FUNCTION`, or `inflated(column)` in an expression), which
`register_sqlite_functions` adds to every connection `make_engine` opens. A
connection without it (the plain `sqlite3` shell, a raw `sqlite3.connect`)
cannot insert, update or delete samples (the FTS5 triggers call it) nor read
their text: call `register_sqlite_functions` on it first. Comparing the
column itself in SQL (`completion = ?`, `LIKE`) on SQLite compares the stored
bytes, not the text: inflate it first.
"""

from __future__ import annotations

import sqlite3
import zlib
from typing import Any, Final

from sqlalchemy import Text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import Function
from sqlalchemy.types import TypeDecorator

TEXT_FUNCTION: Final = "tp_text"  # the SQL function that inflates a stored value
# zlib's default. On generated prose (benchmarks/bench_samples.py's) 1 deflates
# 1.5 KB in ~30 us instead of ~45 us to a 6 % larger stream; 9 gains nothing.
_LEVEL: Final = 6


def pack_text(text: str) -> str | bytes:
    """What to store for `text` on SQLite: its UTF-8 deflated by zlib, or `text`
    itself when that is not smaller (short texts, incompressible ones)."""
    raw = text.encode("utf-8")
    packed = zlib.compress(raw, _LEVEL)
    return packed if len(packed) < len(raw) else text


def unpack_text(value: str | bytes | None) -> str | None:
    """The text of a stored value: a `str` as it is (stored plain: before the
    compression, or not worth compressing), `bytes` inflated, None as None."""
    if value is None or isinstance(value, str):
        return value
    return zlib.decompress(value).decode("utf-8")


class StoredText(TypeDecorator[str]):
    """A TEXT column whose values SQLite stores through `pack_text` (read back
    through `unpack_text`); on any other database, the text unchanged.

    Only what goes through the column's type is converted: a raw DBAPI insert
    must call `pack_text` itself, and SQL must read the text with `inflated`.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | bytes | None:
        if value is None or dialect.name != "sqlite":
            return value
        return pack_text(value)

    def process_result_value(self, value: Any | None, dialect: Dialect) -> str | None:
        if dialect.name != "sqlite":
            return value
        return unpack_text(value)


def inflated(column: ColumnElement[Any] | QueryableAttribute[Any]) -> ColumnElement[str]:
    """SQLite: `tp_text(column)`, the text of a `StoredText` column in SQL."""
    return Function(TEXT_FUNCTION, column, type_=Text())


def register_sqlite_functions(dbapi_connection: sqlite3.Connection) -> None:
    """Add `tp_text` to a SQLite connection: the FTS5 triggers and the text
    search call it, so every connection that writes or searches samples needs it.

    Deterministic (the same value, the same text), so SQLite may use it in
    views, triggers and indexes, and factor repeated calls out.
    """
    dbapi_connection.create_function(TEXT_FUNCTION, 1, unpack_text, deterministic=True)
