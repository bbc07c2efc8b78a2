"""Server settings: one pydantic-settings class, read from the environment.

Built by the caller (`Settings()` in the CLI, explicit values in tests), never
at import time, so importing the package has no side effects.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_database_url() -> str:
    return "sqlite:///./training_platform.db"


class Settings(BaseSettings):
    """Everything the server needs; each field is also an environment variable."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    database_url: str = Field(
        default_factory=_default_database_url,
        validation_alias="DATABASE_URL",
        description="SQLAlchemy URL; default a SQLite file in the working directory. "
        "PostgreSQL: postgresql+psycopg://user@host/db (postgresql:// is accepted too).",
    )
    metrics_dir: Path = Field(
        default=Path("./platform_metrics"),
        validation_alias="PLATFORM_METRICS_DIR",
        description="Directory scanned for {job_id}_metrics.jsonl files (jobs are "
        "discovered there without any call).",
    )
    api_token: str | None = Field(
        default=None,
        validation_alias="PLATFORM_API_TOKEN",
        description="When set, every /api route and WebSocket requires "
        "'Authorization: Bearer <token>'.",
    )
    host: str = Field(
        default="127.0.0.1", validation_alias="PLATFORM_HOST", description="Bind address."
    )
    port: int = Field(
        default=8000, ge=0, le=65535, validation_alias="PLATFORM_PORT", description="Bind port."
    )
    ssh_key_dir: Path = Field(
        default_factory=lambda: Path.home() / ".ssh",
        validation_alias="PLATFORM_SSH_KEY_DIR",
        description="Private keys named by SSH jobs must lie inside this directory.",
    )
    ssh_known_hosts: Path | None = Field(
        default=None,
        validation_alias="PLATFORM_SSH_KNOWN_HOSTS",
        description="Extra known_hosts file, checked besides ~/.ssh/known_hosts of the "
        "user the server runs as. Unknown hosts are always refused.",
    )
    ssh_timeout: float = Field(
        default=10.0,
        gt=0,
        validation_alias="PLATFORM_SSH_TIMEOUT",
        description="Seconds allowed for every SSH connect and SFTP call.",
    )
    max_line_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        validation_alias="PLATFORM_MAX_LINE_BYTES",
        description="Metrics lines longer than this are skipped (and counted), never buffered.",
    )
    sync_batch_bytes: int = Field(
        default=8 << 20,
        ge=4096,
        validation_alias="PLATFORM_SYNC_BATCH_BYTES",
        description="Bytes read and committed per transaction while catching up a file.",
    )
    poll_interval: float = Field(
        default=1.0,
        ge=0,
        validation_alias="PLATFORM_POLL_INTERVAL",
        description="Seconds between background discovery/sync rounds (0 disables them; "
        "POST .../metrics/sync still works).",
    )
    auto_migrate: bool = Field(
        default=True,
        validation_alias="PLATFORM_AUTO_MIGRATE",
        description="Bring a fresh database up to the schema head on start "
        "(a database at an older revision still needs `training-platform migrate`).",
    )

    @field_validator("database_url")
    @classmethod
    def _use_psycopg3(cls, url: str) -> str:
        # SQLAlchemy maps bare postgresql:// to psycopg2, which we do not ship.
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url
