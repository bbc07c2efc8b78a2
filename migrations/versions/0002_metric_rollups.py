"""metric rollups: precomputed min/max buckets for downsampled history

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("bucket", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("stats", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_metric_rollups_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "level", "bucket", name=op.f("pk_metric_rollups")),
    )
    # The buckets of rows stored before this revision are built by 0008, at
    # head: building them here with today's code would write columns that
    # later revisions add.


def downgrade() -> None:
    op.drop_table("metric_rollups")
