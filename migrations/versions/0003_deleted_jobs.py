"""deleted jobs: tombstones that keep discovery from re-registering a deleted run

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deleted_jobs",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("deleted_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_deleted_jobs")),
    )


def downgrade() -> None:
    op.drop_table("deleted_jobs")
