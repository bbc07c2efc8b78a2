"""The trigram indexes behind the samples' text search (`q`), on both databases.

`q` is a case-insensitive substring of a sample's prompt or completion. A
`LIKE '%q%'` has no index to use, so each database gets a trigram index of
the two texts, defined here once (migrations 0006 and 0010 call
`create_text_search`):

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
  benchmarks' raw inserts). A completion is stored zlib-compressed
  (`store/stored_text.py`, migration 0010: ~0.45x the text, so that a run's
  samples take less disk than its JSONL file): the samples' triggers index
  `tp_text(completion)`, the inflated text, and the FTS table's external
  content is the view `samples_text` (`rowid AS id, tp_text(completion)`),
  which FTS5 reads to 'rebuild' (and to check its integrity). So a
  connection without the `tp_text` function (the plain `sqlite3` shell;
  `make_engine` registers it on each of its own) cannot insert, update or
  delete samples, nor read their text (it can still query `samples_fts`,
  which gives rowids). `detail=none` keeps only which rows hold a
  trigram, not where: about 0.4x the text on disk instead of ~2.4x, and
  ~40 % less insert time; so a query is the AND of the needle's trigrams
  (`fts_match`), a superset that the caller rechecks with the exact
  `LIKE` on the candidate rows. Should the rowids ever be renumbered (a
  dump and restore), `rebuild_text_search` rebuilds both from the rows.
- **PostgreSQL**: the `pg_trgm` extension; a GIN index (`gin_trgm_ops`) on
  the prompts' text, which `ILIKE '%q%'` uses as it is, and the completions'
  word index with its vocabulary (`word_search.py`, since revision 0009: a
  trigram index of the completions was about as large as their JSONL).
  `CREATE EXTENSION` needs the privilege to create it; without it none of
  them is built, a warning says so, and `q` runs as a scan, as before (same
  answers, slower).

A needle shorter than 3 characters has no trigram: it is answered by the
scan on both databases.

A later migration that copies `samples` or `sample_prompts` in batch mode
(SQLite: a new table, the rows copied, the old one dropped) loses the
triggers and renumbers the rowids (and SQLite refuses to rename a table
into place while the view names a missing one): call `drop_text_search`
before it and `create_text_search` after.
"""

from __future__ import annotations

import logging
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from training_platform.store import word_search
from training_platform.store.stored_text import TEXT_FUNCTION

logger = logging.getLogger(__name__)

MIN_INDEXED_CHARS: Final = 3  # a trigram
SAMPLES_FTS: Final = "samples_fts"
PROMPTS_FTS: Final = "sample_prompts_fts"
# SQLite: the completions inflated, the external content of `samples_fts`.
SAMPLES_TEXT: Final = "samples_text"
# Table -> (its FTS table, the indexed column, its rowid column).
_FTS: Final = {
    "samples": (SAMPLES_FTS, "completion", "rowid"),
    "sample_prompts": (PROMPTS_FTS, "text", "id"),
}
# FTS5's own tables behind each virtual table (external content: no _content).
_SHADOWS: Final = ("_data", "_idx", "_config", "_docsize")
# PostgreSQL: the prompts' trigram index (the completions have word_search.py's).
PROMPTS_TRIGRAM_INDEX: Final = "ix_sample_prompts_text_trgm"
# Revisions 0006-0008's trigram index of the completions (0009 replaced it).
COMPLETIONS_TRIGRAM_INDEX: Final = "ix_samples_completion_trgm"


def is_text_search_object(name: str | None) -> bool:
    """Whether `name` is one of these indexes or their tables: Alembic's comparison
    of the models with the database leaves them out (they have no model)."""
    if name is None:
        return False
    if name in {PROMPTS_TRIGRAM_INDEX, COMPLETIONS_TRIGRAM_INDEX, SAMPLES_TEXT}:
        return True
    if name in word_search.OBJECTS:
        return True
    return any(name == fts or name in {fts + s for s in _SHADOWS} for fts, _, _ in _FTS.values())


def _sqlite_ddl(table: str, *, compressed: bool) -> list[str]:
    """`table`'s FTS5 table and triggers; with `compressed`, the completions'
    through `tp_text` and the view (revision 0010 on), else the plain text's."""
    fts, column, rowid = _FTS[table]
    content, content_rowid = table, rowid
    new, old = f"new.{column}", f"old.{column}"
    view: list[str] = []
    if compressed and table == "samples":
        content, content_rowid = SAMPLES_TEXT, "id"
        new, old = f"{TEXT_FUNCTION}({new})", f"{TEXT_FUNCTION}({old})"
        view = [
            f"CREATE VIEW {SAMPLES_TEXT} AS SELECT rowid AS id,"
            f" {TEXT_FUNCTION}({column}) AS {column} FROM {table}"
        ]
    add = f"INSERT INTO {fts}(rowid, {column}) VALUES (new.{rowid}, {new});"
    remove = f"INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.{rowid}, {old});"
    return [
        *view,
        # columnsize=0: no per-row token counts (they only serve ranking).
        f"CREATE VIRTUAL TABLE {fts} USING fts5({column}, content='{content}',"
        f" content_rowid='{content_rowid}', tokenize='trigram case_sensitive 0',"
        " detail=none, columnsize=0)",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN {add} END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN {remove} END",
        # An upsert sets every column: a text that did not change costs nothing
        # (the same text packs to the same bytes: comparing them suffices).
        f"CREATE TRIGGER {fts}_update AFTER UPDATE ON {table}"
        f" WHEN old.{column} IS NOT new.{column} OR old.{rowid} IS NOT new.{rowid}"
        f" BEGIN {remove} {add} END",
    ]


def create_text_search(connection: Connection, *, compressed: bool = True) -> bool:
    """Build the indexes over the rows already stored; False when PostgreSQL
    refused `pg_trgm` (then `q` scans, as before, and a warning says why).

    `compressed` (SQLite): the completions are stored compressed, as from
    revision 0010 on; False makes revisions 0006-0009's objects, over the
    plain text (migration 0006, and 0010's downgrade)."""
    if connection.dialect.name == "sqlite":
        for table, (fts, _, _) in _FTS.items():
            for statement in _sqlite_ddl(table, compressed=compressed):
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
    connection.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {PROMPTS_TRIGRAM_INDEX} ON sample_prompts"
            " USING gin (text gin_trgm_ops)"
        )
    )
    # A 256 kB pending list, not 4 MB: unpacked, it would outweigh a small job's index.
    limit = "gin_pending_list_limit = 256"
    connection.execute(text(f"ALTER INDEX {PROMPTS_TRIGRAM_INDEX} SET ({limit})"))
    word_search.create_word_search(connection, with_trigrams=True)
    return True


def trigram_search_available(connection: Connection) -> bool:
    """PostgreSQL: whether `pg_trgm` is installed (0006 could create it)."""
    query = text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
    return connection.execute(query).first() is not None


def drop_text_search(connection: Connection) -> None:
    """Remove what `create_text_search` made (the extension stays: others may use it)."""
    if connection.dialect.name == "sqlite":
        for fts, _, _ in _FTS.values():
            for trigger in ("insert", "delete", "update"):
                connection.execute(text(f"DROP TRIGGER IF EXISTS {fts}_{trigger}"))
            connection.execute(text(f"DROP TABLE IF EXISTS {fts}"))
        connection.execute(text(f"DROP VIEW IF EXISTS {SAMPLES_TEXT}"))
        return
    for name in (PROMPTS_TRIGRAM_INDEX, COMPLETIONS_TRIGRAM_INDEX):
        connection.execute(text(f"DROP INDEX IF EXISTS {name}"))
    word_search.drop_word_search(connection)


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


if __name__ == "__main__":  # the indexes of a database that lacked pg_trgm at migration
    import sys

    from training_platform.store.database import make_engine

    engine = make_engine(sys.argv[1])
    with engine.begin() as connection:
        built = create_text_search(connection)
    sys.exit(0 if built else 1)
