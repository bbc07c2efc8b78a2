"""system_layouts, system_blocks, system_rollups: the hosts' system metrics

`{job_id}_system*.jsonl` (DESIGN.md §6): one sample of one host per line.
Samples are stored a minute at a time per layout (the host's series names,
stored once), compressed together, keyed by (layout, minute); per-minute
and per-hour rollups keep each series' minimum and maximum so that a
month-long history reads a few hundred rows. SQLite keeps the rollups
WITHOUT ROWID (small rows: the primary key is their only index) but not the
blocks (several KB each: they would spill into overflow pages).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "system_layouts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("series", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_system_layouts_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_system_layouts")),
        sa.UniqueConstraint(
            "job_id", "host", "digest", name=op.f("uq_system_layouts_job_id_host_digest")
        ),
    )
    op.create_table(
        "system_blocks",
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("minute", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["layout_id"],
            ["system_layouts.id"],
            name=op.f("fk_system_blocks_layout_id_system_layouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("layout_id", "minute", name=op.f("pk_system_blocks")),
    )
    op.create_table(
        "system_rollups",
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("bucket", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("first_timestamp", sa.Float(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("stats", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["layout_id"],
            ["system_layouts.id"],
            name=op.f("fk_system_rollups_layout_id_system_layouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("layout_id", "width", "bucket", name=op.f("pk_system_rollups")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("system_rollups")
    op.drop_table("system_blocks")
    op.drop_table("system_layouts")
