"""sync state per kind of file: one offset row per (job, kind), the metrics file's is "metrics"

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Batch mode: SQLite cannot change a primary key in place (the table is
    # copied); PostgreSQL gets plain ALTER statements. Existing rows are the
    # metrics files' offsets, which the server default says.
    with op.batch_alter_table("sync_state", recreate="auto") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=32), server_default="metrics", nullable=False)
        )
        batch.drop_constraint("pk_sync_state", type_="primary")
        batch.create_primary_key("pk_sync_state", ["job_id", "kind"])


def downgrade() -> None:
    # Only the metrics rows fit the old one-row-per-job table.
    op.execute("DELETE FROM sync_state WHERE kind <> 'metrics'")
    with op.batch_alter_table("sync_state", recreate="auto") as batch:
        batch.drop_constraint("pk_sync_state", type_="primary")
        batch.create_primary_key("pk_sync_state", ["job_id"])
        batch.drop_column("kind")
