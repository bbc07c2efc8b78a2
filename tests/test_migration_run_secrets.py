"""Migration 0011: run files stored in clear before the platform masked them are
masked in place, on both databases; rows already masked and SQL NULLs stay."""

from __future__ import annotations

import json
from typing import Any

from alembic import command
from sqlalchemy import text

from tests.callbacks.wire.test_secrets import COMMIT, KEPT, MARK, masked_config, secret_config
from training_platform.callbacks.wire.secrets import MASK
from training_platform.store.database import alembic_config, make_engine


def test_0011_masks_the_secrets_stored_in_clear(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0010")
    engine = make_engine(empty_database_url)
    about = {"command": ["train.py", "--hub_token", f"x{MARK}"], "git": {"commit": COMMIT}}
    leaky = json.dumps({**secret_config(), **KEPT})
    rows: list[dict[str, Any]] = [
        {"job": "leaky", "config": leaky, "about": json.dumps(about)},
        {"job": "clean", "config": json.dumps(KEPT), "about": None},
        {"job": "empty", "config": None, "about": None},
    ]
    try:
        with engine.begin() as connection:
            for row in rows:
                connection.execute(
                    text(
                        "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected,"
                        " created_at) VALUES (:job, 'local', true, 'completed', false, 1.0)"
                    ),
                    row,
                )
                connection.execute(
                    text(
                        "INSERT INTO run_files (job_id, digest, config, about, file_refusals,"
                        " read_at) VALUES (:job, 'd', :config, :about, 0, 1.0)"
                    ),
                    row,
                )

        command.upgrade(config, "head")

        with engine.connect() as connection:
            stored = {
                job: (value, about, config_null)
                for job, value, about, config_null in connection.execute(
                    text(
                        "SELECT job_id, config, about, config IS NULL FROM run_files"
                        " ORDER BY job_id"
                    )
                )
            }
        decoded = {
            job: tuple(json.loads(v) if isinstance(v, str) else v for v in values[:2])
            for job, values in stored.items()
        }
        assert decoded["leaky"] == (
            {**masked_config(), **KEPT},
            {"command": ["train.py", "--hub_token", MASK], "git": {"commit": COMMIT}},
        )
        assert decoded["clean"] == (KEPT, None)
        assert stored["empty"][2]  # still SQL NULL, not the JSON null
        command.downgrade(config, "0010")  # nothing to undo
    finally:
        engine.dispose()
