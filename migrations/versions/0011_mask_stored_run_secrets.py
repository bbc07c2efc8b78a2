"""run_files: secrets stored in clear before the platform masked run files are masked

Until this revision the platform stored a run file's `config` and its other
fields (`about`: command, git, host, ...) as the file said, so a file not
written by our callback (an older version, another tool, a hand) was served
with its secrets. Ingestion now masks (`callbacks/wire/secrets.py`,
docs/contract.md "secrets"); a stored version is not read again while its
file's digest is unchanged, and its file may be gone, so the rows are masked
here, in batches by job id. Masking is idempotent: rows the callback already
masked are left as they are.

Downgrade: nothing; a masked secret cannot be restored.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa
from alembic import op

from training_platform.callbacks.wire.secrets import mask_config, mask_run

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH: Final = 500  # run files read, masked and written back at a time
_RUN_FILES = sa.table(
    "run_files",
    sa.column("job_id", sa.String()),
    sa.column("config", sa.JSON()),
    sa.column("about", sa.JSON()),
)


def upgrade() -> None:
    connection = op.get_bind()
    table = _RUN_FILES
    after = ""
    while rows := connection.execute(
        sa.select(table.c.job_id, table.c.config, table.c.about)
        .where(table.c.job_id > after)
        .order_by(table.c.job_id)
        .limit(_BATCH)
    ).all():
        for job_id, config, about in rows:
            # Only what changed is written: a None left out stays SQL NULL
            # (a JSON column would store it as the JSON `null`).
            values: dict[str, Any] = {}
            if config is not None and (masked := mask_config(config, ("config",))) != config:
                values["config"] = masked
            if isinstance(about, dict) and (masked := mask_run(about)) != about:
                values["about"] = masked
            if values:
                connection.execute(table.update().where(table.c.job_id == job_id).values(**values))
        after = rows[-1][0]


def downgrade() -> None:
    pass
