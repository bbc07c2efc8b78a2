"""The job's first critical incident, whichever side found it: jobs.critical_incident

A run the platform finds blowing up (a NaN loss, a KL explosion) is marked
on the job itself: `anomaly_detected` (the API, the live `status` message, the
webhook) is the trainer's status file's flag OR a critical incident, and the
reason is the trainer's or this one's. The trainer's own flag stays in
`anomaly_detected`/`anomaly_reason`, copied from its status file as before.

`jobs.anomaly_alerted_at`: when the webhook was told the flag turned, so it
is told once per job across restarts and processes.

Jobs stored before this revision get their first critical anomaly, if any,
and count as told when flagged (an upgrade alerts nobody about old runs).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The same text `store/job_flags.py` writes: "<type> at step <step>: <message>".
BACKFILL = """
UPDATE jobs SET critical_incident = (
    SELECT a.type || ' at step ' || CAST(a.step AS VARCHAR(20)) || ': ' || a.message
    FROM anomalies a
    WHERE a.job_id = jobs.job_id AND a.severity = 'critical'
    ORDER BY a.step, a.id
    LIMIT 1
)
"""


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("critical_incident", sa.Text(), nullable=True))
        batch.add_column(sa.Column("anomaly_alerted_at", sa.Float(), nullable=True))
    op.execute(BACKFILL)
    op.execute(
        "UPDATE jobs SET anomaly_alerted_at = created_at"
        " WHERE anomaly_detected OR critical_incident IS NOT NULL"
    )


def downgrade() -> None:
    for column in ("anomaly_alerted_at", "critical_incident"):
        if op.get_bind().dialect.name == "sqlite":
            # Natively (SQLite 3.35+): batch mode would copy `jobs` and drop the old
            # table, which with foreign keys on deletes every row that refers to it.
            op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        else:
            op.drop_column("jobs", column)
