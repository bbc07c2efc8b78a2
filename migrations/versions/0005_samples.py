"""samples: generated samples per (job, step, index), their prompts stored once per job;
anomalies.evidence: the sample indexes a finding from samples points at;
jobs.rollout_dir: where verl's rollout dumps of a job are read from

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sample_prompts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_sample_prompts_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sample_prompts")),
        sa.UniqueConstraint("job_id", "digest", name=op.f("uq_sample_prompts_job_id_digest")),
    )
    op.create_table(
        "samples",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("step", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sample_index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=True),
        sa.Column("prompt_id", sa.BigInteger(), nullable=False),
        sa.Column("completion", sa.Text(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("reward_nonfinite", sa.String(length=9), nullable=True),
        sa.Column("rewards", sa.JSON(), nullable=True),
        sa.Column("group_key", sa.String(length=256), nullable=True),
        sa.Column("response_length", sa.Integer(), nullable=True),
        sa.Column("completion_chars", sa.Integer(), nullable=False),
        sa.Column("finish_reason", sa.String(length=32), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_samples_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["sample_prompts.id"], name=op.f("fk_samples_prompt_id_sample_prompts")
        ),
        sa.PrimaryKeyConstraint("job_id", "step", "sample_index", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_job_id_group_key", "samples", ["job_id", "group_key"])
    op.create_index("ix_samples_job_id_prompt_id", "samples", ["job_id", "prompt_id"])
    op.add_column("anomalies", sa.Column("evidence", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("rollout_dir", sa.Text(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # Natively (SQLite 3.35+): batch mode would copy `jobs` and drop the old
        # table, which with foreign keys on deletes every row that refers to it.
        op.execute("ALTER TABLE jobs DROP COLUMN rollout_dir")
    else:
        op.drop_column("jobs", "rollout_dir")
    with op.batch_alter_table("anomalies") as batch:
        batch.drop_column("evidence")
    op.drop_index("ix_samples_job_id_prompt_id", table_name="samples")
    op.drop_index("ix_samples_job_id_group_key", table_name="samples")
    op.drop_table("samples")
    op.drop_table("sample_prompts")
