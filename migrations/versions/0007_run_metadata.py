"""run_files: what each job's `{job_id}_run.json` said last (project, name, tags, config, ...);
job_tags: a job's tags from its run file and from the dashboard, for `?tag=`;
jobs.name, jobs.tags, jobs.notes: what the dashboard set (PATCH /api/jobs/{job_id});
metric_rollups.first_timestamp: each bucket's first record time (no look-up per point)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_COLUMNS = ("name", "tags", "notes")


def upgrade() -> None:
    op.create_table(
        "run_files",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=True),
        sa.Column("project", sa.String(length=256), nullable=True),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("about", sa.JSON(), nullable=True),
        sa.Column("file_error", sa.Text(), nullable=True),
        sa.Column("file_refusals", sa.Integer(), nullable=False),
        sa.Column("read_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_run_files_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_run_files")),
    )
    op.create_index(op.f("ix_run_files_project"), "run_files", ["project"])
    op.create_table(
        "job_tags",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("origin", sa.String(length=8), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_job_tags_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "origin", "tag", name=op.f("pk_job_tags")),
    )
    op.create_index("ix_job_tags_tag", "job_tags", ["tag"])
    op.add_column("jobs", sa.Column("name", sa.String(length=256), nullable=True))
    op.add_column("jobs", sa.Column("tags", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("notes", sa.Text(), nullable=True))
    op.add_column("metric_rollups", sa.Column("first_timestamp", sa.Float(), nullable=True))
    # Existing buckets: the time of the record at their first step (a primary-key
    # look-up per bucket; ~42k buckets per million steps).
    op.execute(
        "UPDATE metric_rollups SET first_timestamp = (SELECT t.timestamp FROM training_metrics t"
        " WHERE t.job_id = metric_rollups.job_id AND t.step = metric_rollups.first_step)"
    )


def downgrade() -> None:
    for table, column in (
        ("metric_rollups", "first_timestamp"),
        *(("jobs", c) for c in JOB_COLUMNS),
    ):
        if op.get_bind().dialect.name == "sqlite":
            # Natively (SQLite 3.35+): batch mode would copy `jobs` and drop the old
            # table, which with foreign keys on deletes every row that refers to it.
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)
    op.drop_index("ix_job_tags_tag", table_name="job_tags")
    op.drop_table("job_tags")
    op.drop_index(op.f("ix_run_files_project"), table_name="run_files")
    op.drop_table("run_files")
