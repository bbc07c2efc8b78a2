"""anomalies.end_step: how far an incident's condition reached after its alert

A detector alerts once per incident (its onset, or an escalation) and then
stays quiet while the condition lasts; the platform's detectors record here
the last step the condition held, so an incident reads as a span from
`step` to `end_step` (the charts' shaded bands). NULL for rows stored before
this revision and for the callback's rows (the platform's row of the same
incident carries the extent).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("anomalies") as batch:
        batch.add_column(sa.Column("end_step", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("anomalies") as batch:
        batch.drop_column("end_step")
