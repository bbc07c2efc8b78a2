"""SQLite: the samples' completions stored zlib-compressed (PostgreSQL: nothing changes)

`samples.completion` keeps its TEXT column; the values become zlib streams
(BLOBs) through `store/stored_text.py`'s `StoredText`, ~0.45x the text, so a
run's samples take less disk than its JSONL file. The text search's objects
are dropped first (the update trigger would index the compressed bytes),
every completion still stored as text is compressed here, in batches of rows
by rowid (in Python: `pack_text`; the connection has `tp_text`, which
inflates, from `make_engine`, but no SQL function packs), and the objects
are made again over the inflated text (`create_text_search`, which rebuilds
the index through the view `samples_text`). The pages freed stay in the file,
reused by later rows, until a `VACUUM`.

Downgrade: the reverse; every completion inflated back to text, and the text
search of revisions 0006-0009 (`compressed=False`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine import Connection

from training_platform.store.stored_text import pack_text, unpack_text
from training_platform.store.text_search import create_text_search, drop_text_search

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH: Final = 2_000  # rows read, converted and written back at a time (~3 MB of text)


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    drop_text_search(connection)
    _convert(connection, "text", pack_text)
    create_text_search(connection, compressed=True)


def downgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    drop_text_search(connection)
    _convert(connection, "blob", unpack_text)
    create_text_search(connection, compressed=False)


def _convert(connection: Connection, stored_as: str, convert: Callable[[Any], object]) -> None:
    """Rewrite each completion stored as `stored_as` (SQLite's `typeof`) with
    `convert(value)`, in rowid order; a value it returns unchanged is left
    alone (`pack_text` keeps a text that zlib would not shrink)."""
    select = sa.text(
        "SELECT rowid, completion FROM samples WHERE rowid > :after"
        " AND typeof(completion) = :kind ORDER BY rowid LIMIT :batch"
    )
    update = sa.text("UPDATE samples SET completion = :value WHERE rowid = :id")
    after = -(2**63)
    while rows := connection.execute(
        select, {"after": after, "kind": stored_as, "batch": _BATCH}
    ).all():
        changed = [
            {"id": rowid, "value": value}
            for rowid, stored in rows
            if (value := convert(stored)) != stored
        ]
        if changed:
            connection.execute(update, changed)
        after = rows[-1][0]
