"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("discovered", sa.Boolean(), nullable=False),
        sa.Column("metrics_dir", sa.Text(), nullable=True),
        sa.Column("ssh_host", sa.String(length=255), nullable=True),
        sa.Column("ssh_port", sa.Integer(), nullable=True),
        sa.Column("ssh_username", sa.String(length=255), nullable=True),
        sa.Column("ssh_key_path", sa.Text(), nullable=True),
        sa.Column("ssh_remote_dir", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("current_step", sa.BigInteger(), nullable=True),
        sa.Column("total_steps", sa.BigInteger(), nullable=True),
        sa.Column("anomaly_detected", sa.Boolean(), nullable=False),
        sa.Column("anomaly_reason", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_synced_at", sa.Float(), nullable=True),
        sa.Column("last_sync_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobs")),
    )
    op.create_table(
        "anomalies",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_anomalies_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_anomalies")),
        sa.UniqueConstraint(
            "job_id", "step", "type", "source", name=op.f("uq_anomalies_job_id_step_type_source")
        ),
    )
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.create_index("ix_anomalies_job_id_step", ["job_id", "step"], unique=False)

    op.create_table(
        "sync_state",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=True),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("discarding", sa.Boolean(), nullable=False),
        sa.Column("lines_malformed", sa.BigInteger(), nullable=False),
        sa.Column("lines_oversized", sa.BigInteger(), nullable=False),
        sa.Column("records_ingested", sa.BigInteger(), nullable=False),
        sa.Column("resets", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_sync_state_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_sync_state")),
    )
    op.create_table(
        "training_metrics",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=True),
        sa.Column("actor_loss", sa.Float(), nullable=True),
        sa.Column("critic_loss", sa.Float(), nullable=True),
        sa.Column("total_loss", sa.Float(), nullable=True),
        sa.Column("reward_mean", sa.Float(), nullable=True),
        sa.Column("reward_std", sa.Float(), nullable=True),
        sa.Column("reward_max", sa.Float(), nullable=True),
        sa.Column("reward_min", sa.Float(), nullable=True),
        sa.Column("kl_mean", sa.Float(), nullable=True),
        sa.Column("kl_max", sa.Float(), nullable=True),
        sa.Column("actor_grad_norm", sa.Float(), nullable=True),
        sa.Column("critic_grad_norm", sa.Float(), nullable=True),
        sa.Column("tokens_per_second", sa.Float(), nullable=True),
        sa.Column("step_time", sa.Float(), nullable=True),
        sa.Column("gpu_memory_allocated", sa.Float(), nullable=True),
        sa.Column("has_anomaly", sa.Boolean(), nullable=False),
        sa.Column("anomaly_type", sa.Text(), nullable=True),
        sa.Column("anomaly_message", sa.Text(), nullable=True),
        sa.Column("timing", sa.JSON(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.Column("other", sa.JSON(), nullable=True),
        sa.Column("anomalies", sa.JSON(), nullable=True),
        sa.Column("nonfinite", sa.JSON(), nullable=True),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_training_metrics_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "step", name=op.f("pk_training_metrics")),
    )
    with op.batch_alter_table("training_metrics", schema=None) as batch_op:
        batch_op.create_index(
            "ix_training_metrics_job_id_timestamp", ["job_id", "timestamp"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("training_metrics", schema=None) as batch_op:
        batch_op.drop_index("ix_training_metrics_job_id_timestamp")

    op.drop_table("training_metrics")
    op.drop_table("sync_state")
    with op.batch_alter_table("anomalies", schema=None) as batch_op:
        batch_op.drop_index("ix_anomalies_job_id_step")

    op.drop_table("anomalies")
    op.drop_table("jobs")
