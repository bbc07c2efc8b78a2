"""jobs.format: which tool's files a job is read from

`platform` (the callback's files, as every job so far) or the format of a run
logged by another tool (DESIGN.md §7): `verl_file` (verl's `file` logger) first,
TensorBoard, MLflow, W&B offline and Trackio to follow.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("format", sa.String(length=16), nullable=False, server_default="platform")
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # Natively (SQLite 3.35+): batch mode would copy `jobs` and drop the old
        # table, which with foreign keys on deletes every row that refers to it.
        op.execute("ALTER TABLE jobs DROP COLUMN format")
    else:
        op.drop_column("jobs", "format")
