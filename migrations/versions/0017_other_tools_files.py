"""Runs logged by other tools, by file: jobs.file, jobs.run and longer sync_state kinds

- `jobs.file`: the file a job's metrics are read from when it is not the
  format's default (verl's file logger: `{job_id}.jsonl` unless named;
  Trackio: the project's database);
- `jobs.run`: the run within that source (Trackio's run name, MLflow's run id);
- `jobs.tracking_uri`: an MLflow tracking database the run is read from;
- `sync_state.kind` up to 255 characters: a TensorBoard run has one row per
  event file, named `metrics.<file name>` (names carry a host and a pid).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("file", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("run", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("tracking_uri", sa.String(length=2000), nullable=True))
    # sync_state only refers to jobs: recreating it (SQLite's batch mode) is safe.
    with op.batch_alter_table("sync_state") as batch:
        batch.alter_column(
            "kind",
            existing_type=sa.String(length=32),
            type_=sa.String(length=255),
            existing_nullable=False,
            existing_server_default="metrics",
        )


def downgrade() -> None:
    with op.batch_alter_table("sync_state") as batch:
        batch.alter_column(
            "kind",
            existing_type=sa.String(length=255),
            type_=sa.String(length=32),
            existing_nullable=False,
            existing_server_default="metrics",
        )
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE jobs DROP COLUMN tracking_uri")  # natively: see 0016's
        op.execute("ALTER TABLE jobs DROP COLUMN run")
        op.execute("ALTER TABLE jobs DROP COLUMN file")
    else:
        op.drop_column("jobs", "tracking_uri")
        op.drop_column("jobs", "run")
        op.drop_column("jobs", "file")
