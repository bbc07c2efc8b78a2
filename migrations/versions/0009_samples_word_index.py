"""PostgreSQL: the completions' text search through a word index and a vocabulary
(`store/word_search.py`) instead of pg_trgm's trigram index, ~4x smaller; the
prompts' trigram index fills a 256 kB pending list, not 4 MB. SQLite: nothing.

Without `pg_trgm` (0006 warned) nothing is built here either: `q` scans.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from training_platform.store.text_search import (
    COMPLETIONS_TRIGRAM_INDEX,
    PROMPTS_TRIGRAM_INDEX,
    create_text_search,
    trigram_search_available,
)
from training_platform.store.word_search import drop_word_search

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "postgresql" or not trigram_search_available(connection):
        return
    connection.execute(text(f"DROP INDEX IF EXISTS {COMPLETIONS_TRIGRAM_INDEX}"))
    create_text_search(connection)


def downgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "postgresql" or not trigram_search_available(connection):
        return
    drop_word_search(connection)
    connection.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {COMPLETIONS_TRIGRAM_INDEX} ON samples USING gin (completion gin_trgm_ops)"
        )
    )
    connection.execute(text(f"ALTER INDEX {PROMPTS_TRIGRAM_INDEX} RESET (gin_pending_list_limit)"))
