"""samples' text search: trigram indexes of completions and prompts
(SQLite: FTS5 `trigram` tables kept by triggers; PostgreSQL: pg_trgm GIN indexes)

The definitions live in `training_platform/store/text_search.py`, the one
place that knows them; existing rows are indexed here (SQLite: 'rebuild').
Without the privilege to create `pg_trgm` on PostgreSQL, the migration
still succeeds, with a warning, and `q` scans as before. SQLite: the objects
over the plain completions of this revision (`compressed=False`); 0010
replaces them when it compresses the completions.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from training_platform.store.text_search import create_text_search, drop_text_search

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_text_search(op.get_bind(), compressed=False)


def downgrade() -> None:
    drop_text_search(op.get_bind())
