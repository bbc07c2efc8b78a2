"""server_instances and ingest_leases: one ingesting process per job, fenced

Several server processes on one PostgreSQL database (DESIGN.md §9) each
heartbeat a `server_instances` row and hold leases on jobs: only a job's
lease holder ingests it, renewing the lease while it lives; another process
takes the job over once the lease expires (database clock). Every grant
bumps the lease's fencing token, which the statement that advances a job's
offset checks, so a holder that lost its lease cannot commit. On SQLite (one
process) the instances table only lets a second server be refused clearly.

Upgrading with processes running: the tables are new, so processes of the
previous version ignore them; start the new version's processes after the
migration and stop the old ones (docs/platform.md, "Several processes").

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "server_instances",
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_server_instances")),
    )
    op.create_table(
        "ingest_leases",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("expires_at", sa.Float(), nullable=False, server_default="0"),
        sa.Column("renewed_at", sa.Float(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_ingest_leases_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_ingest_leases")),
    )
    op.create_index("ix_ingest_leases_holder", "ingest_leases", ["holder"])


def downgrade() -> None:
    op.drop_index("ix_ingest_leases_holder", table_name="ingest_leases")
    op.drop_table("ingest_leases")
    op.drop_table("server_instances")
