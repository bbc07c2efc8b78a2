"""ORM tables. The schema is owned by Alembic: change it here and add a migration."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from training_platform.store.database import Base
from training_platform.store.stored_text import StoredText

JOB_ID = String(128)

# `jobs.status`: what the status file says (pending, running and these), or
# STALLED, which only the platform says: running, but silent for too long.
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "stopped"})
STALLED: Final = "stalled"
# What the status file sets on a job (copied by ingest/status_file.py).
STATUS_FIELDS: Final = (
    "status",
    "current_step",
    "total_steps",
    "anomaly_detected",
    "anomaly_reason",
    "started_at",
    "updated_at",
)


class Job(Base):
    """A training run: where its files are, and what its status file said last."""

    __tablename__ = "jobs"

    job_id: Mapped[str] = mapped_column(JOB_ID, primary_key=True)
    # "local": files in `metrics_dir`; "ssh": files in `ssh_remote_dir` on `ssh_host`.
    source: Mapped[str] = mapped_column(String(16), default="local")
    discovered: Mapped[bool] = mapped_column(Boolean, default=False)
    metrics_dir: Mapped[str | None] = mapped_column(Text)
    ssh_host: Mapped[str | None] = mapped_column(String(255))
    ssh_port: Mapped[int | None] = mapped_column(Integer)
    ssh_username: Mapped[str | None] = mapped_column(String(255))
    ssh_key_path: Mapped[str | None] = mapped_column(Text)
    ssh_remote_dir: Mapped[str | None] = mapped_column(Text)
    # verl's rollout dumps (`{step}.jsonl` per step) read as the job's samples:
    # a local directory, or for an SSH job one on its host. None: the default,
    # `{job_id}_rollouts/` next to a local job's metrics file (when it exists).
    rollout_dir: Mapped[str | None] = mapped_column(Text)
    # From {job_id}_status.json (None until one has been read).
    status: Mapped[str] = mapped_column(String(16), default="pending")
    current_step: Mapped[int | None] = mapped_column(BigInteger)
    total_steps: Mapped[int | None] = mapped_column(BigInteger)
    anomaly_detected: Mapped[bool] = mapped_column(Boolean, default=False)
    anomaly_reason: Mapped[str | None] = mapped_column(Text)
    # The first critical incident of the run, whichever side found it ("<type> at
    # step N: <message>"; store/job_flags.py): with the trainer's flag above, what
    # the job's `anomaly_detected` says. NULL while there is none.
    critical_incident: Mapped[str | None] = mapped_column(Text)
    # When the webhook was told the job's anomaly flag turned (once per job).
    anomaly_alerted_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float | None] = mapped_column(Float)
    # Platform bookkeeping (Unix seconds).
    created_at: Mapped[float] = mapped_column(Float)
    last_synced_at: Mapped[float | None] = mapped_column(Float)
    last_sync_error: Mapped[str | None] = mapped_column(Text)
    # Set from the dashboard (PATCH /api/jobs/{job_id}); None: the run file's says.
    name: Mapped[str | None] = mapped_column(String(256))
    tags: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    notes: Mapped[str | None] = mapped_column(Text)
    # The number of its latest live announcement (`live_outbox`; PostgreSQL only).
    live_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Whose files: "platform" (the callback's) or another tool's (ingest/formats/).
    format: Mapped[str] = mapped_column(String(16), default="platform", server_default="platform")
    # The file its metrics are read from, when not its format's default name.
    file: Mapped[str | None] = mapped_column(String(255))
    # The run within that source (Trackio's run name, MLflow's run id).
    run: Mapped[str | None] = mapped_column(String(255))
    # An MLflow tracking database (source "tracking"): where the run is read from.
    tracking_uri: Mapped[str | None] = mapped_column(String(2000))


class LiveOutbox(Base):
    """One live announcement of a job, numbered by `Job.live_seq` in the transaction
    that stored what it announces, so that every server process on the database
    can deliver it (`store/live_outbox.py`, docs/live.md "Several processes")."""

    __tablename__ = "live_outbox"
    __table_args__ = (Index("ix_live_outbox_created_at", "created_at"),)

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "metrics", "samples", "anomalies", "status"
    payload: Mapped[str] = mapped_column(Text)  # JSON
    created_at: Mapped[float] = mapped_column(Float)


class RunFile(Base):
    """What `{job_id}_run.json` said last (docs/contract.md, run metadata).

    Kept apart from `jobs`: the config may be large and most reads of a job
    (status, sync) never need it.
    """

    __tablename__ = "run_files"

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    digest: Mapped[str | None] = mapped_column(String(64))  # sha256 of the last good file
    project: Mapped[str | None] = mapped_column(String(256), index=True)
    name: Mapped[str | None] = mapped_column(String(256))
    tags: Mapped[list[str] | None] = mapped_column(JSON)
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # framework, git, host, command, started_at, config_dropped: shown as they are.
    about: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    file_error: Mapped[str | None] = mapped_column(Text)  # why the last version was refused
    file_refusals: Mapped[int] = mapped_column(Integer, default=0)
    read_at: Mapped[float] = mapped_column(Float)


class JobTag(Base):
    """One tag of a job, from its run file (`origin` "run") or set by PATCH ("user"):
    what `?tag=` filters on. The shown ones are the user's when `jobs.tags` is
    set, else the run's. Each writer keeps to its own origin, so a sync and a
    PATCH never overwrite each other's rows.
    """

    __tablename__ = "job_tags"

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    origin: Mapped[str] = mapped_column(String(8), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True)
    __table_args__ = (Index("ix_job_tags_tag", "tag"),)


class TrainingMetric(Base):
    """One row per (job, step); the newest record for a step replaces older ones.

    Non-finite values: the numeric column holds NULL and `nonfinite` records
    what it really was ({"actor_loss": "NaN", "extra": {"x": "Infinity"}}), so
    NaN stays distinguishable from missing on SQLite (which stores NaN as NULL)
    and JSON columns stay standard JSON on PostgreSQL.
    """

    __tablename__ = "training_metrics"
    __table_args__ = (Index("ix_training_metrics_job_id_timestamp", "job_id", "timestamp"),)

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    timestamp: Mapped[float | None] = mapped_column(Float)
    actor_loss: Mapped[float | None] = mapped_column(Float)
    critic_loss: Mapped[float | None] = mapped_column(Float)
    total_loss: Mapped[float | None] = mapped_column(Float)
    reward_mean: Mapped[float | None] = mapped_column(Float)
    reward_std: Mapped[float | None] = mapped_column(Float)
    reward_max: Mapped[float | None] = mapped_column(Float)
    reward_min: Mapped[float | None] = mapped_column(Float)
    kl_mean: Mapped[float | None] = mapped_column(Float)
    kl_max: Mapped[float | None] = mapped_column(Float)
    actor_grad_norm: Mapped[float | None] = mapped_column(Float)
    critic_grad_norm: Mapped[float | None] = mapped_column(Float)
    tokens_per_second: Mapped[float | None] = mapped_column(Float)
    step_time: Mapped[float | None] = mapped_column(Float)
    gpu_memory_allocated: Mapped[float | None] = mapped_column(Float)  # GiB
    has_anomaly: Mapped[bool] = mapped_column(Boolean, default=False)
    anomaly_type: Mapped[str | None] = mapped_column(Text)
    anomaly_message: Mapped[str | None] = mapped_column(Text)
    timing: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    other: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    anomalies: Mapped[list[Any] | None] = mapped_column(JSON)
    nonfinite: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    received_at: Mapped[float] = mapped_column(Float)


class SamplePrompt(Base):
    """A prompt's text, once per job: a GRPO group's completions share their prompt."""

    __tablename__ = "sample_prompts"
    __table_args__ = (UniqueConstraint("job_id", "digest"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[str] = mapped_column(JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64))  # sha256 of the text, hex
    text: Mapped[str] = mapped_column(Text)


class Sample(Base):
    """One generated sample (`{job_id}_samples.jsonl`); the newest line for (step, index) wins.

    A non-finite reward is NULL in `reward` with its name in `reward_nonfinite`
    (as `training_metrics.nonfinite` does), so NaN stays apart from "no reward".
    """

    __tablename__ = "samples"
    __table_args__ = (
        Index("ix_samples_job_id_group_key", "job_id", "group_key"),
        Index("ix_samples_job_id_prompt_id", "job_id", "prompt_id"),
    )

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    sample_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    timestamp: Mapped[float | None] = mapped_column(Float)
    prompt_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("sample_prompts.id"))
    # zlib-compressed on SQLite, plain text on PostgreSQL (store/stored_text.py).
    completion: Mapped[str] = mapped_column(StoredText)
    reward: Mapped[float | None] = mapped_column(Float)
    reward_nonfinite: Mapped[str | None] = mapped_column(String(9))
    rewards: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    group_key: Mapped[str | None] = mapped_column(String(256))
    response_length: Mapped[int | None] = mapped_column(Integer)
    # The completion's length in characters: what "sort by length" uses
    # when the trainer gave no response_length.
    completion_chars: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    received_at: Mapped[float] = mapped_column(Float)


class Anomaly(Base):
    """One anomaly at a step: reported by the trainer's callback or found by the platform."""

    __tablename__ = "anomalies"
    __table_args__ = (
        UniqueConstraint("job_id", "step", "type", "source"),
        Index("ix_anomalies_job_id_step", "job_id", "step"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    # "callback" | "platform" | "samples" | "system"
    source: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    # What shows it, when a detector can point at it: the sample indexes of
    # the step for a finding from samples.
    evidence: Mapped[list[Any] | None] = mapped_column(JSON)
    # The last step its condition held before the incident ended or alerted
    # again (the platform's detectors keep it; NULL: the step itself).
    end_step: Mapped[int | None] = mapped_column(BigInteger)


class SyncState(Base):
    """How far one of a job's files has been ingested; committed with the rows it covers.

    One row per (job, kind of file): `kind` names an `ingest/file_kinds.py`
    kind ("metrics" for `{job_id}_metrics.jsonl`).
    """

    __tablename__ = "sync_state"

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(255), primary_key=True, server_default="metrics")
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    discarding: Mapped[bool] = mapped_column(Boolean, default=False)
    lines_malformed: Mapped[int] = mapped_column(BigInteger, default=0)
    lines_oversized: Mapped[int] = mapped_column(BigInteger, default=0)
    records_ingested: Mapped[int] = mapped_column(BigInteger, default=0)
    resets: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[float | None] = mapped_column(Float)


class DeletedJob(Base):
    """A tombstone: a job deleted through the API, so discovery does not bring it back.

    No foreign key to `jobs`: the job row is gone, the tombstone outlives it.
    Registering the id again (`POST /api/jobs`) removes the tombstone.
    """

    __tablename__ = "deleted_jobs"

    job_id: Mapped[str] = mapped_column(JOB_ID, primary_key=True)
    deleted_at: Mapped[float] = mapped_column(Float)


# Levels of `metric_rollups` (WIDTHS in history/series/stored/metric_rollups.py: 32
# steps, then 4x per level). The top level's few buckets count a job's rows (store/jobs.py).
ROLLUP_LEVELS: Final = 8


class MetricRollup(Base):
    """One downsampling bucket (history/series/stored/metric_rollups.py).

    It covers steps `bucket * WIDTHS[level]` up to the next multiple, summarised.
    """

    __tablename__ = "metric_rollups"

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    row_count: Mapped[int] = mapped_column(BigInteger)
    # Per series [min, max, sum, finite count, non-finite count]: see encode_stats.
    stats: Mapped[bytes] = mapped_column(LargeBinary)
    # The timestamp of the record at `first_step` (None: it had none), so a
    # downsampled answer's `timestamps` need no look-up per point.
    first_timestamp: Mapped[float | None] = mapped_column(Float)


class RollupColumn(Base):
    """A sealed chunk of one level's buckets, stored per series
    (history/series/stored/rollup_columns.py).

    A copy of `metric_rollups` laid out for reading a few series of a long run
    (a comparison's two of ~25): one row per chunk of `CHUNK` buckets and
    series, plus one row (`series` "") with the chunk's bucket bounds and
    series names. Derived: rebuilt whenever its buckets change.
    """

    __tablename__ = "rollup_columns"

    job_id: Mapped[str] = mapped_column(
        JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    level: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    chunk: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    series: Mapped[str] = mapped_column(Text, primary_key=True)
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class SystemLayout(Base):
    """The series one host's system samples carry, in the order of their values.

    A host keeps one layout while its sampler reports the same things; a GPU
    list that changes length mid-run starts another (store/system_values.py).
    """

    __tablename__ = "system_layouts"
    __table_args__ = (UniqueConstraint("job_id", "host", "digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(JOB_ID, ForeignKey("jobs.job_id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(64))
    series: Mapped[list[str]] = mapped_column(JSON)


class SystemBlock(Base):
    """Up to a minute of one layout's samples, compressed together (store/system_blocks.py).

    A sample a second for a month is 2.6 million samples a host: stored a row
    each they would outweigh the run's metrics many times over; a minute of
    them compresses well (most series hardly move). The newest line for
    (host, timestamp) wins. A rowid table on SQLite, unlike the rollups: a
    block of several KB would spill out of a WITHOUT ROWID table's pages
    into overflow pages mostly left empty.
    """

    __tablename__ = "system_blocks"

    layout_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("system_layouts.id", ondelete="CASCADE"), primary_key=True
    )
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    sample_count: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class SystemRollup(Base):
    """Per layout, `width` seconds of samples summarised: each series' smallest and
    largest value (store/system_values.py), so a month-long query reads a few
    hundred rows, not millions."""

    __tablename__ = "system_rollups"
    __table_args__ = ({"sqlite_with_rowid": False},)

    layout_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("system_layouts.id", ondelete="CASCADE"), primary_key=True
    )
    width: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    sample_count: Mapped[int] = mapped_column(Integer)
    first_timestamp: Mapped[float] = mapped_column(Float)
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    stats: Mapped[bytes] = mapped_column(LargeBinary)
