"""Server settings: one pydantic-settings class, read from the environment.

Built by the caller (`Settings()` in the CLI, explicit values in tests), never
at import time, so importing the package has no side effects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from training_platform.callbacks.wire.locations import user_metrics_dir
from training_platform.webhook_settings import WebhookSettings


class Settings(WebhookSettings, BaseSettings):
    """Everything the server needs; each field is also an environment variable."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    database_url: str = Field(
        default="sqlite:///./training_platform.db",
        validation_alias="DATABASE_URL",
        description="SQLAlchemy URL; default a SQLite file in the working directory. "
        "PostgreSQL: postgresql+psycopg://user@host/db (postgresql:// is accepted too).",
    )
    metrics_dir: Path = Field(
        default_factory=user_metrics_dir,
        validation_alias="PLATFORM_METRICS_DIR",
        description="Directory scanned for {job_id}_metrics.jsonl files (jobs are "
        "discovered there without any call); created when missing. Default: the user's "
        "data directory, ~/.local/share/training-platform/metrics on Linux "
        "($XDG_DATA_HOME respected), where PlatformCallback writes by default too.",
    )
    allowed_job_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        validation_alias="PLATFORM_ALLOWED_JOB_ROOTS",
        description="Comma-separated directories that POST /api/jobs may register local "
        "directories (metrics_dir, rollout_dir) under, symlinks resolved; "
        "PLATFORM_METRICS_DIR is always allowed. Empty (the default): any directory the "
        "server can read, as before; anything else is 422 invalid_source.",
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
    log_format: Literal["text", "json"] = Field(
        default="text",
        validation_alias="PLATFORM_LOG_FORMAT",
        description="Server log lines: text, or json (one object a line); both carry the pid.",
    )
    log_file: Path | None = Field(
        default=None,
        validation_alias="PLATFORM_LOG_FILE",
        description="Also write the server's log lines (same format) to this file, rotated "
        "by size; its directory is created. Unset: stderr only.",
    )
    log_file_max_bytes: int = Field(
        default=10 << 20,
        ge=1024,
        validation_alias="PLATFORM_LOG_FILE_MAX_BYTES",
        description="Size at which PLATFORM_LOG_FILE is rotated (renamed .1, .2, ...).",
    )
    log_file_backups: int = Field(
        default=5,
        ge=1,  # the stdlib handler never rotates with 0 backups: the file would grow
        validation_alias="PLATFORM_LOG_FILE_BACKUPS",
        description="Rotated log files kept besides the current one (the oldest is deleted).",
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
    follow_symlinks: bool = Field(
        default=False,
        validation_alias="PLATFORM_FOLLOW_SYMLINKS",
        description="Read a job's metrics and status files even when they are symbolic "
        "links (which may lead anywhere the server can read). Off: a link is refused and "
        "the job's last_sync_error says so. Profiling artifacts are never served through "
        "a link, whatever this says.",
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
    sync_request_budget: float = Field(
        default=2.0,
        gt=0,
        validation_alias="PLATFORM_SYNC_REQUEST_BUDGET",
        description="Seconds of ingestion one POST .../metrics/sync may spend before it "
        "answers (at_eof false, bytes_remaining); the background sync carries on.",
    )
    poll_interval: float = Field(
        default=1.0,
        ge=0,
        validation_alias="PLATFORM_POLL_INTERVAL",
        description="Seconds between background discovery/sync rounds, the fallback for "
        "local files behind file-system notifications (0 disables background sync "
        "entirely, watching included; POST .../metrics/sync still works).",
    )
    auto_migrate: bool = Field(
        default=True,
        validation_alias="PLATFORM_AUTO_MIGRATE",
        description="Bring a fresh database up to the schema head on start "
        "(a database at an older revision still needs `training-platform migrate`).",
    )

    # Live stream, playback and platform-side diagnosis (docs/live.md).
    watch_files: bool = Field(
        default=True,
        validation_alias="PLATFORM_WATCH_FILES",
        description="Notice appends to local metrics files through file-system "
        "notifications (watchfiles) rather than waiting for the next poll.",
    )
    ssh_poll_interval: float = Field(
        default=2.0,
        gt=0,
        validation_alias="PLATFORM_SSH_POLL_INTERVAL",
        description="Seconds between polls of a running SSH job's files (SFTP has no "
        "notifications).",
    )
    live_queue_size: int = Field(
        default=1000,
        ge=1,
        validation_alias="PLATFORM_LIVE_QUEUE_SIZE",
        description="Messages buffered per live WebSocket client; a client further behind "
        "is closed (code 1013) and should reconnect with since_step.",
    )
    live_send_timeout: float = Field(
        default=10.0,
        gt=0,
        validation_alias="PLATFORM_LIVE_SEND_TIMEOUT",
        description="Seconds one WebSocket send may take before the client counts as too "
        "slow and is closed.",
    )
    live_max_message_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        validation_alias="PLATFORM_LIVE_MAX_MESSAGE_BYTES",
        description="Largest WebSocket message sent; a record whose message would be larger "
        'goes out as its step and timestamp with "truncated": true (fetch it over REST).',
    )
    live_max_client_message_bytes: int = Field(
        default=4096,
        ge=64,
        validation_alias="PLATFORM_LIVE_MAX_CLIENT_MESSAGE_BYTES",
        description="Largest WebSocket message accepted from a client (playback controls); "
        "a larger one closes the connection with code 1009.",
    )
    ws_allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="PLATFORM_WS_ALLOWED_ORIGINS",
        description="Comma-separated origins (scheme://host[:port]) whose pages may open "
        "WebSockets; same-origin pages and clients that send no Origin (not browsers) are "
        "always allowed; '*' allows any. CORS does not cover WebSocket upgrades.",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="PLATFORM_ALLOWED_HOSTS",
        description="Comma-separated host names (the Host header, without port) this server "
        "answers besides IP addresses, localhost, this machine's names and PLATFORM_HOST; "
        "'*.example.com' allows subdomains, '*' any host (behind a proxy that checks Host). "
        "Stops DNS-rebinding pages from reading the API (docs/platform.md).",
    )
    ws_ping_interval: float = Field(
        default=20.0,
        ge=0,
        validation_alias="PLATFORM_WS_PING_INTERVAL",
        description="Seconds between WebSocket pings to each client, so dead clients are "
        "noticed (0 disables); applied by the uvicorn server.",
    )
    ws_ping_timeout: float = Field(
        default=20.0,
        gt=0,
        validation_alias="PLATFORM_WS_PING_TIMEOUT",
        description="Seconds a client has to answer a ping before it is disconnected.",
    )
    ws_per_message_deflate: bool = Field(
        default=False,
        validation_alias="PLATFORM_WS_PER_MESSAGE_DEFLATE",
        description="Compress WebSocket messages (permessage-deflate) when clients ask. "
        "Off by default: compression runs once per client per message, which at hundreds "
        "of clients costs more CPU than the bandwidth it saves (see docs/live.md).",
    )
    live_status_interval: float = Field(
        default=1.0,
        ge=0,
        le=60,
        validation_alias="PLATFORM_LIVE_STATUS_INTERVAL",
        description="Seconds between a job's progress-only status messages on the live "
        "stream (current_step moving): at most one per job per interval, built once for all "
        "clients; a change of status, total_steps or the anomaly flag or reason goes out at once. "
        "0 sends every change.",
    )
    live_outbox_retention: float = Field(
        default=600.0,
        gt=0,
        validation_alias="PLATFORM_LIVE_OUTBOX_RETENTION",
        description="PostgreSQL, several server processes: seconds each live announcement "
        "stays in the outbox for processes (and their clients) that lag behind; a process "
        "further behind tells its clients to reconnect (they resume from their last step).",
    )
    live_job_wait: float = Field(
        default=120.0,
        ge=0,
        le=3600,
        validation_alias="PLATFORM_LIVE_JOB_WAIT",
        description="Seconds a live WebSocket for a valid but not yet known job id stays open "
        'waiting for the job\'s files to appear (it is sent {"type": "waiting"}); after that '
        "it closes with job_not_found. 0 refuses unknown jobs at once.",
    )
    history_page_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        validation_alias="PLATFORM_HISTORY_PAGE_SIZE",
        description="Records per query when a live client backfills (since_step) or a "
        "playback reads history: neither ever loads a whole run.",
    )
    history_max_response_bytes: int = Field(
        default=32 << 20,
        ge=4 << 20,
        le=1 << 30,
        validation_alias="PLATFORM_HISTORY_MAX_RESPONSE_BYTES",
        description="Largest body GET .../metrics answers, whatever its parameters. A page "
        "of records ends early (truncated: true, next_start_step says where to go on); a "
        "?max_points= answer leaves out the series that do not fit (truncated: true, "
        "series_omitted names them; ask for them with fields=).",
    )
    history_max_series: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        validation_alias="PLATFORM_HISTORY_MAX_SERIES",
        description="Most series one ?max_points= answer holds, in name order; the rest "
        "are listed in series_omitted (bounds the work and memory of a run that logs "
        "thousands of distinct keys).",
    )
    compare_max_points: int = Field(
        default=100_000,
        ge=2,
        le=10_000_000,
        validation_alias="PLATFORM_COMPARE_MAX_POINTS",
        description="Most points one GET /api/compare may ask for, all runs together "
        "(runs x max_points; 20 runs x 5,000 or 5 x 20,000 by default): beyond it the "
        "request is a 422, so one request cannot hold a worker for tens of seconds.",
    )
    compare_exact_smoothing_rows: int = Field(
        default=20_000,
        ge=0,
        le=10_000_000,
        validation_alias="PLATFORM_COMPARE_EXACT_SMOOTHING_ROWS",
        description="GET /api/compare smooths a run from its exact records when its range "
        "holds at most this many (each is read); beyond, from the buckets "
        "(smoothing_exact: false; docs/contract.md, compare).",
    )
    profile_reports_at_once: int = Field(
        default=2,
        ge=1,
        le=64,
        validation_alias="PLATFORM_PROFILE_REPORTS_AT_ONCE",
        description="Profile reports (GET /api/jobs/{id}/profile/report) computed at once; "
        "more wait their turn. Requests for the same unchanged profile share one "
        "computation and then its cached result, whatever this is.",
    )
    playback_interval: float = Field(
        default=0.1,
        gt=0,
        le=60,
        validation_alias="PLATFORM_PLAYBACK_INTERVAL",
        description="Seconds between records at playback speed 1; at speed s, this divided by s.",
    )
    diagnostics_enabled: bool = Field(
        default=True,
        validation_alias="PLATFORM_DIAGNOSTICS",
        description="Run the anomaly detectors over every newly stored record, whatever "
        'the trainer\'s callback was configured to do (source "platform").',
    )
    diagnostics_kl_threshold: float = Field(
        default=1.0,
        gt=0,
        validation_alias="PLATFORM_DIAGNOSTICS_KL_THRESHOLD",
        description="kl.mean above this is a critical kl_explosion.",
    )
    diagnostics_loss_patience: int = Field(
        default=50,
        ge=1,
        validation_alias="PLATFORM_DIAGNOSTICS_LOSS_PATIENCE",
        description="Steps a loss (total, policy or value) may stay frozen, or the blocks "
        "over which a falling loss must keep falling, before a loss_plateau warning; "
        "and the steps a total or value loss has to go below its start level before a "
        "loss_not_decreasing warning (docs/trainer.md, Detectors).",
    )
    diagnostics_disabled: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="PLATFORM_DIAGNOSTICS_DISABLED",
        description="Comma-separated anomaly types the platform does not look for "
        "(e.g. reward_hacking for a run whose reward is meant to climb fast).",
    )
    diagnostics_warmup_records: int = Field(
        default=500,
        ge=0,
        le=100_000,
        validation_alias="PLATFORM_DIAGNOSTICS_WARMUP_RECORDS",
        description="Stored records replayed (silently) into a job's detectors the first "
        "time this process diagnoses it, so a restart neither re-alerts nor forgets.",
    )
    stall_factor: float = Field(
        default=10.0,
        gt=1,
        validation_alias="PLATFORM_STALL_FACTOR",
        description="A running job whose metrics file has not grown for this many times "
        "its usual step time is marked stalled ...",
    )
    stall_min_seconds: float = Field(
        default=120.0,
        gt=0,
        validation_alias="PLATFORM_STALL_MIN_SECONDS",
        description="... and for at least this many seconds.",
    )
    lease_seconds: float = Field(
        default=10.0,
        ge=1.0,
        le=600.0,
        validation_alias="PLATFORM_LEASE_SECONDS",
        description="PostgreSQL, several processes: how long a process's lease on a job "
        "outlives its last renewal (renewed every third of it); a dead process's jobs "
        "move to another within this plus a third.",
    )

    @field_validator(
        "ws_allowed_origins",
        "allowed_hosts",
        "diagnostics_disabled",
        "allowed_job_roots",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("metrics_dir", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        # PLATFORM_METRICS_DIR="" means unset, as on the trainer side
        # (wire/locations.py), not the working directory.
        if isinstance(value, str) and not value.strip():
            return user_metrics_dir()
        return value

    @field_validator("allowed_job_roots")
    @classmethod
    def _resolved_roots(cls, roots: list[Path]) -> list[Path]:
        # Compared with registered paths once those are resolved too, so a root
        # reached through a symlink still holds what lies under its target.
        try:
            return [root.expanduser().resolve() for root in roots]
        except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
            raise ValueError(f"cannot resolve an allowed job root: {exc}") from None

    @field_validator("ws_allowed_origins")
    @classmethod
    def _origins_without_path(cls, origins: list[str]) -> list[str]:
        # Browsers send "scheme://host[:port]", never a path or a trailing slash.
        return [origin.rstrip("/").lower() for origin in origins]

    @field_validator("log_file", mode="before")
    @classmethod
    def _empty_log_file_is_none(cls, value: object) -> object:
        return None if value == "" else value  # `PLATFORM_LOG_FILE=` turns it off

    @field_validator("database_url")
    @classmethod
    def _use_psycopg3(cls, url: str) -> str:
        # SQLAlchemy maps bare postgresql:// to psycopg2, which we do not ship.
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url
