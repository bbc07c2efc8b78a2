"""live_outbox and jobs.live_seq: every live announcement, numbered per job, for every process

Several server processes share one PostgreSQL database (DESIGN.md §9): a
live client of any process must receive every record of its job, whichever
process ingested it. Each announcement (a committed batch of records or
samples, the anomalies found in it, a status change) gets the job's next
`live_seq` and a row in `live_outbox`, in the transaction that stores what
it announces; the other processes hear of it through LISTEN/NOTIFY and read
the rows they have not delivered yet (`live/cluster_feed.py`). Rows are
kept for a while (`PLATFORM_LIVE_OUTBOX_RETENTION`) and then pruned. On
SQLite (one process) both stay unused.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("live_seq", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_table(
        "live_outbox",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_live_outbox_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "seq", name=op.f("pk_live_outbox")),
    )
    op.create_index("ix_live_outbox_created_at", "live_outbox", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_live_outbox_created_at", table_name="live_outbox")
    op.drop_table("live_outbox")
    if op.get_bind().dialect.name == "sqlite":
        # Natively (SQLite 3.35+): batch mode would copy `jobs` and drop the old
        # table, which with foreign keys on deletes every row that refers to it.
        op.execute("ALTER TABLE jobs DROP COLUMN live_seq")
    else:
        op.drop_column("jobs", "live_seq")
