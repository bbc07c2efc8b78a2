"""The trigram indexes behind the samples' text search (`q`), on both databases.

`q` is a case-insensitive substring of a sample's prompt or completion. A
`LIKE '%q%'` has no index to use, so each database gets a trigram index of
the two texts, defined here once (migration 0006 calls `create_text_search`):

- **SQLite**: two FTS5 tables with the `trigram` tokenizer, `samples_fts`
  over `samples.completion` and `sample_prompts_fts` over
  `sample_prompts.text`. They are *external content* tables (the text is not
  copied: the index points at the rows) keyed by the row's rowid:
  `sample_prompts.id` is an INTEGER PRIMARY KEY, `samples` (composite key,
  not WITHOUT ROWID) has an implicit rowid, which an upsert (ON CONFLICT DO
  UPDATE) keeps and VACUUM preserves (SQLite >= 3.28 copies tables with their
  rowids; checked on 3.40). Triggers keep them in step with every insert,
  update and delete of the rows, in the writer's own transaction, whatever
  writes them (the samples file, verl's rollouts, a job's deletion, the
  benchmarks' raw inserts). `detail=none` keeps only which rows hold a
  trigram, not where: about 0.4x the text on disk instead of ~2.4x, and
  ~40 % less insert time; so a query is the AND of the needle's trigrams
  (`fts_match`), a superset that the caller rechecks with the exact
  `LIKE` on the candidate rows. Should the rowids ever be renumbered (a
  dump and restore), `rebuild_text_search` rebuilds both from the rows.
- **PostgreSQL**: the `pg_trgm` extension and a GIN index (`gin_trgm_ops`)
  on each text column, which `ILIKE '%q%'` uses as it is. `CREATE EXTENSION`
  needs the privilege to create it; without it the indexes are not built, a
  warning says so, and `q` runs as a scan, as before (same answers, slower).

A needle shorter than 3 characters has no trigram: it is answered by the
scan on both databases.

A later migration that copies `samples` or `sample_prompts` in batch mode
(SQLite: a new table, the rows copied, the old one dropped) loses the
triggers and renumbers the rowids: call `drop_text_search` before it and
`create_text_search` after.
"""

from __future__ import annotations

import logging
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

logger = logging.getLogger(__name__)

MIN_INDEXED_CHARS: Final = 3  # a trigram
SAMPLES_FTS: Final = "samples_fts"
PROMPTS_FTS: Final = "sample_prompts_fts"
# Table -> (its FTS table, the indexed column, its rowid column).
_FTS: Final = {
    "samples": (SAMPLES_FTS, "completion", "rowid"),
    "sample_prompts": (PROMPTS_FTS, "text", "id"),
}
# FTS5's own tables behind each virtual table (external content: no _content).
_SHADOWS: Final = ("_data", "_idx", "_config", "_docsize")
# PostgreSQL: index name -> (table, column).
TRIGRAM_INDEXES: Final = {
    "ix_samples_completion_trgm": ("samples", "completion"),
    "ix_sample_prompts_text_trgm": ("sample_prompts", "text"),
}


def is_text_search_object(name: str | None) -> bool:
    """Whether `name` is one of these indexes or their tables: Alembic's comparison
    of the models with the database leaves them out (they have no model)."""
    if name is None:
        return False
    if name in TRIGRAM_INDEXES:
        return True
    return any(name == fts or name in {fts + s for s in _SHADOWS} for fts, _, _ in _FTS.values())


def _sqlite_ddl(table: str) -> list[str]:
    fts, column, rowid = _FTS[table]
    add = f"INSERT INTO {fts}(rowid, {column}) VALUES (new.{rowid}, new.{column});"
    remove = (
        f"INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.{rowid}, old.{column});"
    )
    return [
        # columnsize=0: no per-row token counts (they only serve ranking).
        f"CREATE VIRTUAL TABLE {fts} USING fts5({column}, content='{table}',"
        f" content_rowid='{rowid}', tokenize='trigram case_sensitive 0',"
        " detail=none, columnsize=0)",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN {add} END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN {remove} END",
        # An upsert sets every column: a text that did not change costs nothing.
        f"CREATE TRIGGER {fts}_update AFTER UPDATE ON {table}"
        f" WHEN old.{column} IS NOT new.{column} OR old.{rowid} IS NOT new.{rowid}"
        f" BEGIN {remove} {add} END",
    ]


def create_text_search(connection: Connection) -> bool:
    """Build the indexes over the rows already stored; False when PostgreSQL
    refused `pg_trgm` (then `q` scans, as before, and a warning says why)."""
    if connection.dialect.name == "sqlite":
        for table, (fts, _, _) in _FTS.items():
            for statement in _sqlite_ddl(table):
                connection.execute(text(statement))
            connection.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')"))
        return True
    try:
        with connection.begin_nested():  # a refusal must not abort the migration
            connection.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except DBAPIError as exc:  # no privilege, or the package is not installed
        logger.warning(
            "text search: CREATE EXTENSION pg_trgm failed (%s): the samples' `q` will"
            " scan every sample of a job; docs/platform.md says how to add the index",
            str(exc.orig).strip().splitlines()[0] if exc.orig else exc,
        )
        return False
    for name, (table, column) in TRIGRAM_INDEXES.items():
        connection.execute(
            text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin ({column} gin_trgm_ops)")
        )
    return True


def drop_text_search(connection: Connection) -> None:
    """Remove what `create_text_search` made (the extension stays: others may use it)."""
    if connection.dialect.name == "sqlite":
        for fts, _, _ in _FTS.values():
            for trigger in ("insert", "delete", "update"):
                connection.execute(text(f"DROP TRIGGER IF EXISTS {fts}_{trigger}"))
            connection.execute(text(f"DROP TABLE IF EXISTS {fts}"))
        return
    for name in TRIGRAM_INDEXES:
        connection.execute(text(f"DROP INDEX IF EXISTS {name}"))


def rebuild_text_search(connection: Connection) -> None:
    """SQLite: rebuild both FTS indexes from the rows (after a renumbering of rowids)."""
    if connection.dialect.name == "sqlite":
        for fts, _, _ in _FTS.values():
            connection.execute(text(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')"))


def fts_match(needle: str) -> str | None:
    """The FTS5 query for rows that may hold `needle`: trigrams covering it, each a
    quoted string (double quotes doubled), ANDed. None when it has none (< 3
    characters).

    `detail=none` keeps no positions, so this is a superset of the rows holding
    `needle` as a substring: the caller keeps the exact `LIKE` as a recheck.
    Every third trigram (and the last) covers the needle: the overlapping ones
    would narrow the candidates little, and each costs a walk of its rows
    (a common one, every row). The tokenizer folds case itself
    (`case_sensitive 0`), as it did the rows'.
    """
    if len(needle) < MIN_INDEXED_CHARS:
        return None
    starts = [*range(0, len(needle) - 2, 3), len(needle) - 3]
    trigrams = dict.fromkeys(needle[start : start + 3] for start in starts)
    return " AND ".join('"' + trigram.replace('"', '""') + '"' for trigram in trigrams)
