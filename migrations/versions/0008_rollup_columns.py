"""rollup_columns: sealed chunks of rollup buckets stored per series (few series of a long run read fast)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.orm import Session

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rollup_columns",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("chunk", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("series", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_rollup_columns_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "job_id", "level", "chunk", "series", name=op.f("pk_rollup_columns")
        ),
    )
    _backfill()


def _backfill() -> None:
    """Buckets for jobs whose rows have none (rows stored before revision 0002,
    whose backfill moved here: it runs today's code, which needs today's
    columns), then chunks for every job's buckets (later ones are kept at
    ingestion); ~1 s per million steps. Reads work without chunks, only slower."""
    from training_platform.history.series.stored.refresh import rebuild_rollups
    from training_platform.history.series.stored.rollup_columns import rebuild_chunks

    session = Session(bind=op.get_bind())
    unrolled = session.scalars(
        sa.text(
            "SELECT DISTINCT job_id FROM training_metrics t WHERE NOT EXISTS"
            " (SELECT 1 FROM metric_rollups r WHERE r.job_id = t.job_id)"
        )
    ).all()
    for job_id in unrolled:
        rebuild_rollups(session, job_id=job_id)  # and its chunks
    job_ids = session.scalars(sa.text("SELECT DISTINCT job_id FROM metric_rollups")).all()
    for job_id in sorted(set(job_ids) - set(unrolled)):
        rebuild_chunks(session, job_id)
    session.flush()


def downgrade() -> None:
    op.drop_table("rollup_columns")
